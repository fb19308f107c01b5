// Test helper: certificates made by OpenSSL for the TLS tests (weft/comm/tls.hpp): a CA, members
// "a" and "b" it signs, a self-signed "stranger" and "other", signed by another CA. Link
// OpenSSL::SSL (libcrypto's X.509 and PEM functions).
#pragma once

#include <weft/comm/tls.hpp>

#include <catch2/catch.hpp>

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <utility>

#include <unistd.h>

namespace weft_test {

struct pkey_free {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
struct x509_free {
  void operator()(X509* x) const { X509_free(x); }
};
using pkey_ptr = std::unique_ptr<EVP_PKEY, pkey_free>;
using x509_ptr = std::unique_ptr<X509, x509_free>;

// A P-256 key and a certificate for `cn` signed by (issuer, issuer_key), or self-signed.
inline std::pair<pkey_ptr, x509_ptr> make_cert(const std::string& cn, X509* issuer, EVP_PKEY* issuer_key, bool ca) {
  pkey_ptr key(EVP_EC_gen("P-256"));
  REQUIRE(key);
  x509_ptr x(X509_new());
  X509_set_version(x.get(), 2);
  static long serial = 1;
  ASN1_INTEGER_set(X509_get_serialNumber(x.get()), serial++);
  X509_gmtime_adj(X509_getm_notBefore(x.get()), -60);
  X509_gmtime_adj(X509_getm_notAfter(x.get()), 3600L * 24);
  X509_set_pubkey(x.get(), key.get());
  X509_NAME* name = X509_get_subject_name(x.get());
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, reinterpret_cast<const unsigned char*>(cn.c_str()), -1, -1, 0);
  X509_set_issuer_name(x.get(), issuer ? X509_get_subject_name(issuer) : name);
  if (ca) {
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, issuer ? issuer : x.get(), x.get(), nullptr, nullptr, 0);
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, NID_basic_constraints, "critical,CA:TRUE");
    REQUIRE(ext != nullptr);
    X509_add_ext(x.get(), ext, -1);
    X509_EXTENSION_free(ext);
  }
  REQUIRE(X509_sign(x.get(), issuer_key ? issuer_key : key.get(), EVP_sha256()) > 0);
  return {std::move(key), std::move(x)};
}

// A folder of PEM files: ca.pem, and <name>.crt / <name>.key for members "a" and "b" (signed by
// the CA), "stranger" (self-signed) and "other" (signed by another CA).
struct cert_dir {
  std::string dir;
  cert_dir() {
    char tmpl[] = "/tmp/weft_tls_test_XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    dir = tmpl;
    auto [ca_key, ca] = make_cert("weft test CA", nullptr, nullptr, true);
    auto [other_ca_key, other_ca] = make_cert("another CA", nullptr, nullptr, true);
    write_cert("ca", ca.get(), ca_key.get());
    for (const char* m : {"a", "b"}) {
      auto [k, x] = make_cert(m, ca.get(), ca_key.get(), false);
      write_cert(m, x.get(), k.get());
    }
    auto [sk, sx] = make_cert("stranger", nullptr, nullptr, false);
    write_cert("stranger", sx.get(), sk.get());
    auto [ok, ox] = make_cert("other", other_ca.get(), other_ca_key.get(), false);
    write_cert("other", ox.get(), ok.get());
  }
  ~cert_dir() { std::system(("rm -rf " + dir).c_str()); }
  void write_cert(const std::string& name, X509* x, EVP_PKEY* k) const {
    FILE* f = std::fopen((dir + "/" + name + ".crt").c_str(), "w");
    REQUIRE(f != nullptr);
    PEM_write_X509(f, x);
    std::fclose(f);
    f = std::fopen((dir + "/" + name + ".key").c_str(), "w");
    REQUIRE(f != nullptr);
    PEM_write_PrivateKey(f, k, nullptr, nullptr, 0, nullptr, nullptr);
    std::fclose(f);
  }
  weft::comm::tls_certificates files(const std::string& member) const {
    return {dir + "/ca.crt", dir + "/" + member + ".crt", dir + "/" + member + ".key"};
  }
};

/// The folder, made once per process (and removed at its exit).
inline const cert_dir& certs() {
  static const cert_dir d;
  return d;
}

}  // namespace weft_test
