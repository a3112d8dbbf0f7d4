#!/usr/bin/env node
// bench/tune.mjs against the simulator: a `sluice sim` playing an Ollama server with the
// reference's model (24 layers, a 2.1 s load, 12.8 KiB of KV cache per token of context) behind
// a gateway, the default 13-configuration matrix (or the arguments given, passed on).
//
// Usage: node bench/tune-sim.mjs [tune.mjs arguments: --runs 3 --tokens 64 --jsonl OUT ...]
import { spawn } from 'node:child_process';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { KEY, keysAll, startGateway, startSim } from '../tests/integration/lib.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const sim = await startSim({ 'load-time': '2100ms', ttft: '10ms', 'inter-token': '5ms', 'ttft-per-prompt-token': 0.02 });
const gw = await startGateway({
  keys: keysAll(),
  models: [{ alias: 'tune', provider: 'ollama', base_url: sim.url, model: 'qwen2.5:0.5b' }],
});
const code = await new Promise((resolve) => {
  const child = spawn(process.execPath, [path.join(here, 'tune.mjs'), '--url', gw.url, '--key', KEY, '--model', 'tune',
    '--ollama', sim.url, '--ollama-model', 'qwen2.5:0.5b', ...process.argv.slice(2)], { stdio: 'inherit' });
  child.on('exit', (c) => resolve(c ?? 1));
});
await gw.stop();
await sim.stop();
process.exit(code);
