#pragma once
// TLS on a listener: the server's certificate and key, and optionally the CAs whose client
// certificates it accepts. Built from PEM files; OpenSSL stays inside src/http.
#include <cstdint>
#include <memory>
#include <string>

namespace sluice::http {

struct TlsSettings {
  std::string cert_file;       // the certificate chain, the server's own first
  std::string key_file;        // its private key (unencrypted)
  std::string client_ca_file;  // set: clients are asked for a certificate these CAs signed
  bool client_cert_required = true;  // with client_ca_file: a handshake without one fails
  bool tls13_only = false;           // else TLS 1.2 and 1.3
};

// What an operator wants to see of the certificate in force.
struct TlsInfo {
  std::string subject;         // of the server's certificate, RFC 2253 ("CN=gw.example,O=...")
  std::string issuer;
  std::int64_t not_after = 0;  // Unix seconds
  std::string cert_file;
  bool client_certs = false;   // client certificates asked for
  bool client_cert_required = false;
};

// An OpenSSL server context. Connections hold a reference to the one they were accepted
// with, so replacing it (a reload) changes nothing for them.
class TlsContext;

// Reads the files and checks that they make a usable server context (the key matches the
// certificate, the client CAs parse). Throws std::runtime_error naming the file and what
// is wrong with it.
std::shared_ptr<TlsContext> make_tls_context(const TlsSettings& settings);
TlsInfo tls_info(const TlsContext& ctx);

}  // namespace sluice::http
