#include "http/tls.hpp"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <ctime>
#include <stdexcept>

#include "http/tls_context.hpp"

namespace sluice::http {

namespace {

namespace ssl = boost::asio::ssl;

// The last OpenSSL error on this thread, as text ("" when none), and the queue cleared.
std::string openssl_error() {
  std::string out;
  while (const unsigned long e = ::ERR_get_error()) {
    char buf[256];
    ::ERR_error_string_n(e, buf, sizeof buf);
    if (out.empty()) out = buf;  // the first is the cause; the rest repeat it up the stack
  }
  return out;
}

[[noreturn]] void fail(const std::string& what, const std::string& file) {
  std::string why = openssl_error();
  throw std::runtime_error("tls: " + what + " " + file + (why.empty() ? "" : ": " + why));
}

std::string name_text(const X509_NAME* name) {
  if (!name) return {};
  BIO* bio = ::BIO_new(::BIO_s_mem());
  if (!bio) return {};
  ::X509_NAME_print_ex(bio, name, 0, XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB);
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio, &data);
  std::string out(data ? data : "", len > 0 ? static_cast<std::size_t>(len) : 0);
  ::BIO_free(bio);
  return out;
}

// Offers HTTP/1.1 to a client that negotiates the protocol (curl offers h2 first): the
// listener speaks HTTP/1.1 only.
int select_http11(SSL*, const unsigned char** out, unsigned char* outlen, const unsigned char* in, unsigned int inlen,
                  void*) {
  static constexpr unsigned char kHttp11[] = {8, 'h', 't', 't', 'p', '/', '1', '.', '1'};
  unsigned char* selected = nullptr;
  if (::SSL_select_next_proto(&selected, outlen, kHttp11, sizeof kHttp11, in, inlen) != OPENSSL_NPN_NEGOTIATED) {
    return SSL_TLSEXT_ERR_NOACK;  // no protocol in common: go on without one (HTTP/1.1)
  }
  *out = selected;
  return SSL_TLSEXT_ERR_OK;
}

}  // namespace

std::shared_ptr<TlsContext> make_tls_context(const TlsSettings& s) {
  auto t = std::make_shared<TlsContext>();
  ::ERR_clear_error();
  SSL_CTX* ctx = t->ctx.native_handle();
  ::SSL_CTX_set_min_proto_version(ctx, s.tls13_only ? TLS1_3_VERSION : TLS1_2_VERSION);
  // No renegotiation (a client could make the server redo handshakes at will); the
  // server's order of ciphers.
  ::SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE | SSL_OP_NO_COMPRESSION);
  // OpenSSL's record buffers are given back while a connection is idle (keep-alive
  // connections mostly are).
  ::SSL_CTX_set_mode(ctx, SSL_MODE_RELEASE_BUFFERS);
  // An encrypted key is refused, not prompted for: OpenSSL's default asks on the terminal
  // (or stdin), which would block the reload, or the start, for good.
  ::SSL_CTX_set_default_passwd_cb(ctx, [](char*, int, int, void*) { return 0; });
  if (::SSL_CTX_use_certificate_chain_file(ctx, s.cert_file.c_str()) != 1) fail("cannot use the certificate chain in", s.cert_file);
  if (::SSL_CTX_use_PrivateKey_file(ctx, s.key_file.c_str(), SSL_FILETYPE_PEM) != 1 || ::SSL_CTX_check_private_key(ctx) != 1) {
    if (ERR_GET_REASON(::ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH) {
      fail("the private key in " + s.key_file + " does not match the certificate in", s.cert_file);
    }
    fail("cannot use the private key (it must be unencrypted PEM) in", s.key_file);
  }
  // Sessions resumed only within this context (needed with client certificates).
  static constexpr unsigned char kSessionContext[] = "sluice";
  ::SSL_CTX_set_session_id_context(ctx, kSessionContext, sizeof kSessionContext - 1);
  ::SSL_CTX_set_alpn_select_cb(ctx, select_http11, nullptr);
  if (!s.client_ca_file.empty()) {
    if (::SSL_CTX_load_verify_locations(ctx, s.client_ca_file.c_str(), nullptr) != 1) {
      fail("cannot read the client CA certificates in", s.client_ca_file);
    }
    STACK_OF(X509_NAME)* names = ::SSL_load_client_CA_file(s.client_ca_file.c_str());
    if (!names) fail("no CA certificate in", s.client_ca_file);
    ::SSL_CTX_set_client_CA_list(ctx, names);  // the CAs named to the client (it picks its certificate by them)
    ::SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | (s.client_cert_required ? SSL_VERIFY_FAIL_IF_NO_PEER_CERT : 0), nullptr);
  }
  const X509* cert = ::SSL_CTX_get0_certificate(ctx);
  if (!cert) fail("no certificate in", s.cert_file);
  t->info.subject = name_text(::X509_get_subject_name(cert));
  t->info.issuer = name_text(::X509_get_issuer_name(cert));
  std::tm tm{};
  if (::ASN1_TIME_to_tm(::X509_get0_notAfter(cert), &tm) == 1) t->info.not_after = ::timegm(&tm);
  t->info.cert_file = s.cert_file;
  t->info.client_certs = !s.client_ca_file.empty();
  t->info.client_cert_required = t->info.client_certs && s.client_cert_required;
  return t;
}

TlsInfo tls_info(const TlsContext& ctx) { return ctx.info; }

}  // namespace sluice::http
