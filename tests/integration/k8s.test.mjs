// deploy/k8s, checked offline: every manifest against the Kubernetes OpenAPI schemas (the
// kubernetes-models package carries them, the Prometheus Operator's too), the kustomize
// renderings when kubectl is here, and what must agree with the binary: the configuration
// loads, the probes' ports and paths answer, the HPA's metric exists, and the grace period
// covers the drain phases.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import YAML from 'yaml';

import { BIN, REPO, rawRequest, startGateway, tempDir } from './lib.mjs';

const run = promisify(execFile);
const K8S = path.join(REPO, 'deploy', 'k8s');

// apiVersion/kind → the model class that validates it.
async function modelFor(apiVersion, kind) {
  const pkg = apiVersion === 'monitoring.coreos.com/v1' ? '@kubernetes-models/prometheus-operator' : 'kubernetes-models';
  const mod = await import(`${pkg}/${apiVersion}/${kind}`).catch(() => null);
  return mod?.[kind];
}

async function validate(doc, where) {
  assert.ok(doc?.apiVersion && doc?.kind, `${where}: no apiVersion/kind`);
  const Model = await modelFor(doc.apiVersion, doc.kind);
  assert.ok(Model, `${where}: no schema for ${doc.apiVersion} ${doc.kind}`);
  if (doc.kind === 'Secret' && doc.data) {
    // kubectl kustomize wraps long base64 values over lines; the API server reads them whole.
    doc = { ...doc, data: Object.fromEntries(Object.entries(doc.data).map(([k, v]) => [k, v.replace(/\s+/g, '')])) };
  }
  try {
    new Model(doc).validate();
  } catch (e) {
    assert.fail(`${where}: ${doc.kind} ${doc.metadata?.name}: ${e.message}`);
  }
}

const docs = (text) => YAML.parseAllDocuments(text).map((d) => d.toJS()).filter(Boolean);
const KUBECTL = (() => {
  try {
    execFileSync('kubectl', ['version', '--client'], { stdio: 'ignore' });
    return 'kubectl';
  } catch {
    return null;
  }
})();
const render = (dir) => docs(execFileSync(KUBECTL, ['kustomize', path.join(K8S, dir)], { encoding: 'utf8' }));
const byKind = (all, kind) => all.filter((d) => d.kind === kind);
const one = (all, kind) => {
  const found = byKind(all, kind);
  assert.equal(found.length, 1, `one ${kind}`);
  return found[0];
};

describe('deploy/k8s', () => {
  test('every manifest file validates against the Kubernetes schemas', async () => {
    const files = [
      ...['deployment', 'service', 'pdb', 'hpa', 'servicemonitor'].map((f) => path.join(K8S, 'base', `${f}.yaml`)),
      path.join(K8S, 'overlays', 'example', 'ingress.yaml'),
      path.join(K8S, 'prometheus-adapter', 'rules.yaml'),
    ];
    let n = 0;
    for (const f of files) {
      for (const d of docs(fs.readFileSync(f, 'utf8'))) {
        await validate(d, path.relative(REPO, f));
        n++;
      }
    }
    assert.equal(n, files.length);
  });

  test('a broken manifest is caught (the validation can fail)', async () => {
    const d = YAML.parse(fs.readFileSync(path.join(K8S, 'base', 'deployment.yaml'), 'utf8'));
    d.spec.replicas = 'three';
    d.spec.template.spec.containers[0].ports[0].containerPort = 'http';
    await assert.rejects(validate(d, 'mutated'), /replicas must be integer/);
  });

  describe('rendered by kustomize', { skip: KUBECTL ? false : 'kubectl (with kustomize) is not installed: the renderings are not checked' }, () => {
    let base, overlay;
    before(() => {
      base = render('base');
      overlay = render('overlays/example');
    });

    test('base and the example overlay render, and every object validates', async () => {
      for (const d of [...base, ...overlay]) await validate(d, 'kustomize');
      assert.deepEqual(byKind(base, 'Deployment').length, 1);
      for (const d of overlay) assert.equal(d.metadata.namespace, d.kind === 'ConfigMap' && d.metadata.name === 'adapter-config' ? 'monitoring' : 'llm');
    });

    test('the objects refer to each other by the names kustomize gave them', () => {
      for (const all of [base, overlay]) {
        const dep = one(all, 'Deployment');
        const pod = dep.spec.template;
        const svc = one(all, 'Service');
        const names = (kind) => byKind(all, kind).map((d) => d.metadata.name);
        const cm = pod.spec.volumes.find((v) => v.configMap);
        assert.ok(names('ConfigMap').includes(cm.configMap.name), `ConfigMap ${cm.configMap.name}`);
        // The selectors all find the pods.
        for (const sel of [dep.spec.selector.matchLabels, svc.spec.selector, one(all, 'PodDisruptionBudget').spec.selector.matchLabels, one(all, 'ServiceMonitor').spec.selector.matchLabels]) {
          for (const [k, v] of Object.entries(sel)) assert.equal(pod.metadata.labels[k], v, `selector ${k}=${v}`);
        }
        assert.ok(Object.keys(one(all, 'PodDisruptionBudget').spec.selector.matchLabels).length > 0, 'a PDB without a selector takes every pod');
        for (const [k, v] of Object.entries(one(all, 'ServiceMonitor').spec.selector.matchLabels)) assert.equal(svc.metadata.labels[k], v);
        const hpa = one(all, 'HorizontalPodAutoscaler');
        assert.equal(hpa.spec.scaleTargetRef.name, dep.metadata.name);
        // Named ports: the Service's targets, the ServiceMonitor's and the probes' exist.
        const ports = new Set(pod.spec.containers[0].ports.map((p) => p.name));
        for (const p of svc.spec.ports) assert.ok(ports.has(p.targetPort), `Service targetPort ${p.targetPort}`);
        assert.ok(svc.spec.ports.some((p) => p.name === one(all, 'ServiceMonitor').spec.endpoints[0].port));
      }
      const secrets = byKind(overlay, 'Secret').map((s) => s.metadata.name);
      const pod = one(overlay, 'Deployment').spec.template.spec;
      assert.ok(secrets.includes(pod.volumes.find((v) => v.secret).secret.secretName));
      assert.ok(secrets.includes(pod.containers[0].envFrom[0].secretRef.name));
      const ing = one(overlay, 'Ingress');
      assert.ok(one(overlay, 'Service').spec.ports.some((p) => p.name === ing.spec.rules[0].http.paths[0].backend.service.port.name));
      assert.equal(one(overlay, 'HorizontalPodAutoscaler').spec.maxReplicas, 20);
      assert.match(pod.containers[0].image, /^registry\.example\.com\/platform\/sluice:/);
    });

    describe('agrees with the binary', () => {
      let gw, cfg, dir;
      before(async () => {
        // The base's configuration, run for real: keys_file pointed at the example's keys.
        const cm = one(base, 'ConfigMap');
        cfg = YAML.parse(cm.data['sluice.yaml']);
        dir = tempDir('sluice-k8s-');
        gw = await startGateway(
          {
            ...cfg,
            instance: 'k8s-check',
            listen: '127.0.0.1:0',
            admin: { listen: '127.0.0.1:0' },
            access_log: path.join(dir, 'access.log'),
            data_dir: dir,
            keys_file: path.join(K8S, 'overlays', 'example', 'keys.yaml'),
          },
          {},
        );
      });
      after(async () => gw?.stop());

      test("the configuration files load (sluice check-config, the overlay's with its environment)", async () => {
        for (const [all, envFile] of [[base, null], [overlay, path.join(K8S, 'overlays', 'example', 'sluice.env')]]) {
          const text = byKind(all, 'ConfigMap').find((c) => c.data?.['sluice.yaml']).data['sluice.yaml'];
          const file = path.join(dir, `check-${envFile ? 'overlay' : 'base'}.yaml`);
          fs.writeFileSync(file, text.replace('/etc/sluice/keys/keys.yaml', path.join(K8S, 'overlays', 'example', 'keys.yaml')));
          const env = { ...process.env };
          if (envFile) {
            for (const line of fs.readFileSync(envFile, 'utf8').split('\n').filter((l) => l.includes('='))) {
              env[line.slice(0, line.indexOf('='))] = line.slice(line.indexOf('=') + 1);
            }
          }
          await run(BIN, ['check-config', file], { env });
        }
      });

      test("the container's ports are the configuration's listeners", () => {
        for (const all of [base, overlay]) {
          const conf = YAML.parse(byKind(all, 'ConfigMap').find((c) => c.data?.['sluice.yaml']).data['sluice.yaml']);
          const ports = Object.fromEntries(one(all, 'Deployment').spec.template.spec.containers[0].ports.map((p) => [p.name, p.containerPort]));
          assert.equal(ports.http, Number(conf.listen.split(':').at(-1)));
          assert.equal(ports.admin, Number(conf.admin.listen.split(':').at(-1)));
        }
      });

      test('the probes ask the admin listener paths that answer 200 there', async () => {
        const c = one(base, 'Deployment').spec.template.spec.containers[0];
        for (const probe of [c.startupProbe, c.livenessProbe, c.readinessProbe]) {
          assert.equal(probe.httpGet.port, 'admin');
          const r = await rawRequest({ port: gw.adminPort, path: probe.httpGet.path });
          assert.equal(r.status, 200, probe.httpGet.path);
        }
        assert.equal(c.readinessProbe.httpGet.path, '/ready', 'readiness follows the drain');
        assert.equal(c.livenessProbe.httpGet.path, '/health', 'liveness does not');
      });

      test("the autoscaler's pod metric is one the gateway exports, under the adapter rule's name", async () => {
        const hpa = one(base, 'HorizontalPodAutoscaler');
        const name = hpa.spec.metrics.find((m) => m.type === 'Pods').pods.metric.name;
        const metrics = (await rawRequest({ port: gw.adminPort, path: '/metrics' })).body;
        assert.match(metrics, new RegExp(`^# TYPE ${name} gauge$`, 'm'));
        const rules = YAML.parse(YAML.parse(fs.readFileSync(path.join(K8S, 'prometheus-adapter', 'rules.yaml'), 'utf8')).data['config.yaml']).rules;
        assert.ok(rules.some((r) => r.name.as === name && r.seriesQuery.startsWith(`${name}{`)));
        assert.equal(one(base, 'ServiceMonitor').spec.endpoints[0].path, '/metrics');
      });

      test('the grace period covers preStop, the drain delay and the shutdown grace; the Ingress waits as long as a request may take', () => {
        const seconds = (d) => {
          const m = /^(\d+(?:\.\d+)?)(ms|s|m)$/.exec(d);
          return Number(m[1]) * { ms: 0.001, s: 1, m: 60 }[m[2]];
        };
        for (const all of [base, overlay]) {
          const conf = YAML.parse(byKind(all, 'ConfigMap').find((c) => c.data?.['sluice.yaml']).data['sluice.yaml']);
          const pod = one(all, 'Deployment').spec.template.spec;
          const need = pod.containers[0].lifecycle.preStop.sleep.seconds + seconds(conf.timeouts.drain_delay) + seconds(conf.timeouts.shutdown_grace);
          assert.ok(pod.terminationGracePeriodSeconds >= need + 2, `terminationGracePeriodSeconds ${pod.terminationGracePeriodSeconds} < ${need} + 2`);
          // Taken out of rotation within the drain delay (a pod's own readiness, for
          // whatever balances on it rather than on the endpoints).
          const r = pod.containers[0].readinessProbe;
          assert.ok(r.periodSeconds * r.failureThreshold < seconds(conf.timeouts.drain_delay));
        }
        const ing = one(overlay, 'Ingress').metadata.annotations;
        const conf = YAML.parse(byKind(overlay, 'ConfigMap').find((c) => c.data?.['sluice.yaml']).data['sluice.yaml']);
        assert.ok(Number(ing['nginx.ingress.kubernetes.io/proxy-read-timeout']) >= seconds(conf.timeouts.total));
        assert.equal(ing['nginx.ingress.kubernetes.io/proxy-buffering'], 'off');
        // Status and admin paths are not routed.
        for (const p of one(overlay, 'Ingress').spec.rules[0].http.paths) assert.match(p.path, /^\/v1\//);
      });

      test('the pod runs as non-root on a read-only root filesystem, with requests and limits', () => {
        const pod = one(overlay, 'Deployment').spec.template.spec;
        const c = pod.containers[0];
        assert.equal(pod.securityContext.runAsNonRoot, true);
        assert.equal(c.securityContext.readOnlyRootFilesystem, true);
        assert.equal(c.securityContext.allowPrivilegeEscalation, false);
        assert.ok(c.resources.requests.cpu && c.resources.requests.memory && c.resources.limits.memory);
        // What sluice writes goes to a volume: its data_dir.
        const conf = YAML.parse(byKind(overlay, 'ConfigMap').find((x) => x.data?.['sluice.yaml']).data['sluice.yaml']);
        assert.ok(c.volumeMounts.some((m) => m.mountPath === conf.data_dir && !m.readOnly));
        assert.ok(pod.topologySpreadConstraints.length >= 1);
      });
    });
  });
});
