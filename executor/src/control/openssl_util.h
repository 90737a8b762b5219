// OpenSSL objects owned by std::unique_ptr, and OpenSSL's last error as text: shared by the
// control plane's TLS checks (tls.cc) and the job's own CA (job_tls.cc).
#pragma once

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/x509.h>

#include <memory>
#include <string>

namespace gp::exec {

// unique_ptr's deleter calling OpenSSL's `Free` (X509_free, BIO_free, ...).
template <auto Free>
struct OpenSslFree {
  template <typename T>
  void operator()(T* p) const {
    Free(p);
  }
};
template <typename T, auto Free>
using OpenSslPtr = std::unique_ptr<T, OpenSslFree<Free>>;
using BioPtr = OpenSslPtr<BIO, BIO_free>;
using X509Ptr = OpenSslPtr<X509, X509_free>;
using KeyPtr = OpenSslPtr<EVP_PKEY, EVP_PKEY_free>;

// OpenSSL's reason for the last failure (empty when there is none), and an empty error queue
// for the next call.
inline std::string openssl_error() {
  const unsigned long e = ERR_peek_last_error();
  char buf[256] = {};
  if (e != 0) ERR_error_string_n(e, buf, sizeof(buf));
  ERR_clear_error();
  return buf;
}

}  // namespace gp::exec
