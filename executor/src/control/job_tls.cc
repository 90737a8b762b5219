#include "control/job_tls.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <openssl/bn.h>
#include <openssl/core_names.h>
#include <openssl/ec.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/obj_mac.h>
#include <openssl/param_build.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "control/openssl_util.h"

namespace gp::exec {
namespace {

using BnPtr = OpenSslPtr<BIGNUM, BN_free>;

Status openssl_failure(const std::string& what) {
  const std::string why = openssl_error();
  return internal_error(what + (why.empty() ? std::string() : ": " + why));
}

// The CA's P-256 key from the token: the same on every host that holds it.
Result<KeyPtr> derived_ca_key(const JobTlsRequest& r) {
  const std::string seed = std::string("graphpipe job CA v1") + '\0' + r.job_id + '\0' + r.token;
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(reinterpret_cast<const unsigned char*>(seed.data()), seed.size(), digest);
  OpenSslPtr<EC_GROUP, EC_GROUP_free> group(EC_GROUP_new_by_curve_name(NID_X9_62_prime256v1));
  OpenSslPtr<BN_CTX, BN_CTX_free> ctx(BN_CTX_new());
  BnPtr priv(BN_bin2bn(digest, sizeof(digest), nullptr));
  if (!group || !ctx || !priv) return openssl_failure("the job CA's key");
  // A scalar in [1, n): reduced modulo the order (n - 1 < 2^256 - 1: the bias is 2^-128).
  const BIGNUM* order = EC_GROUP_get0_order(group.get());
  BnPtr order_less_one(BN_dup(order));
  if (!order_less_one || !BN_sub_word(order_less_one.get(), 1) ||
      !BN_mod(priv.get(), priv.get(), order_less_one.get(), ctx.get()) ||
      !BN_add_word(priv.get(), 1)) {
    return openssl_failure("the job CA's key");
  }
  OpenSslPtr<EC_POINT, EC_POINT_free> pub(EC_POINT_new(group.get()));
  unsigned char pub_octets[65];
  size_t pub_len = 0;
  if (!pub || !EC_POINT_mul(group.get(), pub.get(), priv.get(), nullptr, nullptr, ctx.get()) ||
      (pub_len = EC_POINT_point2oct(group.get(), pub.get(), POINT_CONVERSION_UNCOMPRESSED,
                                    pub_octets, sizeof(pub_octets), ctx.get())) == 0) {
    return openssl_failure("the job CA's public key");
  }
  OpenSslPtr<OSSL_PARAM_BLD, OSSL_PARAM_BLD_free> build(OSSL_PARAM_BLD_new());
  if (!build ||
      !OSSL_PARAM_BLD_push_utf8_string(build.get(), OSSL_PKEY_PARAM_GROUP_NAME, "prime256v1", 0) ||
      !OSSL_PARAM_BLD_push_BN(build.get(), OSSL_PKEY_PARAM_PRIV_KEY, priv.get()) ||
      !OSSL_PARAM_BLD_push_octet_string(build.get(), OSSL_PKEY_PARAM_PUB_KEY, pub_octets,
                                        pub_len)) {
    return openssl_failure("the job CA's key parameters");
  }
  OpenSslPtr<OSSL_PARAM, OSSL_PARAM_free> params(OSSL_PARAM_BLD_to_param(build.get()));
  OpenSslPtr<EVP_PKEY_CTX, EVP_PKEY_CTX_free> pctx(
      EVP_PKEY_CTX_new_from_name(nullptr, "EC", nullptr));
  EVP_PKEY* key = nullptr;
  if (!params || !pctx || EVP_PKEY_fromdata_init(pctx.get()) <= 0 ||
      EVP_PKEY_fromdata(pctx.get(), &key, EVP_PKEY_KEYPAIR, params.get()) <= 0) {
    return openssl_failure("the job CA's key");
  }
  return KeyPtr(key);
}

Status add_extension(X509* cert, X509* issuer, int nid, const std::string& value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  OpenSslPtr<X509_EXTENSION, X509_EXTENSION_free> ext(
      X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str()));
  if (!ext || !X509_add_ext(cert, ext.get(), -1)) {
    return openssl_failure("certificate extension " + std::string(OBJ_nid2sn(nid)) + " = " + value);
  }
  return ok_status();
}

// An unsigned certificate for `key`, named O=graphpipe, CN=`common_name`, issued by `issuer`
// (the CA certificate; none for the CA itself).
Result<X509Ptr> new_certificate(EVP_PKEY* key, const std::string& common_name, X509* issuer,
                                int valid_days) {
  X509Ptr cert(X509_new());
  unsigned char serial_bytes[16];
  BnPtr serial_bn;
  if (!cert || RAND_bytes(serial_bytes, sizeof(serial_bytes)) != 1) {
    return openssl_failure("a certificate");
  }
  serial_bytes[0] &= 0x7f;  // a positive serial
  serial_bn.reset(BN_bin2bn(serial_bytes, sizeof(serial_bytes), nullptr));
  X509_NAME* name = X509_get_subject_name(cert.get());
  // Clocks across hosts differ: valid from an hour ago.
  if (!serial_bn || !X509_set_version(cert.get(), 2) ||
      !BN_to_ASN1_INTEGER(serial_bn.get(), X509_get_serialNumber(cert.get())) ||
      !X509_gmtime_adj(X509_getm_notBefore(cert.get()), -3600) ||
      !X509_gmtime_adj(X509_getm_notAfter(cert.get()), 86400L * valid_days) ||
      !X509_set_pubkey(cert.get(), key) ||
      !X509_NAME_add_entry_by_txt(name, "O", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>("graphpipe"), -1, -1, 0) ||
      !X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_UTF8,
                                  reinterpret_cast<const unsigned char*>(common_name.c_str()), -1,
                                  -1, 0) ||
      !X509_set_issuer_name(
          cert.get(), issuer ? X509_get_subject_name(issuer) : X509_get_subject_name(cert.get()))) {
    return openssl_failure("a certificate");
  }
  return cert;
}

Status sign(X509* cert, EVP_PKEY* key) {
  if (X509_sign(cert, key, EVP_sha256()) <= 0) return openssl_failure("signing a certificate");
  return ok_status();
}

// subjectAltName for the names: IP literals as IP, host names as DNS.
Result<std::string> alt_names(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) {
    unsigned char buf[16];
    const bool ip =
        inet_pton(AF_INET, n.c_str(), buf) == 1 || inet_pton(AF_INET6, n.c_str(), buf) == 1;
    const bool host = !n.empty() && n.size() <= 253 &&
                      n.find_first_not_of(
                          "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
                          "0123456789.-") == std::string::npos;
    if (!ip && !host) return invalid_argument("--name '" + n + "': not a host name or IP address");
    out += (out.empty() ? "" : ",") + std::string(ip ? "IP:" : "DNS:") + n;
  }
  return out;
}

// `contents` as `path`, mode 0600, replacing any file there whole (never through a link).
Status write_private(const std::string& path, const std::string& contents) {
  const std::string tmp = path + ".tmp";
  ::unlink(tmp.c_str());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) return invalid_argument("cannot write " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < contents.size()) {
    const ssize_t n = ::write(fd, contents.data() + done, contents.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      ::unlink(tmp.c_str());
      return invalid_argument("cannot write " + tmp + ": " + why);
    }
    done += static_cast<size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0 || ::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    return invalid_argument("cannot write " + path + ": " + why);
  }
  return ok_status();
}

// What PEM_write_bio_* wrote into a memory BIO (`what` names it in the error).
template <typename Write>
Result<std::string> pem_text(const std::string& what, Write&& write) {
  BioPtr bio(BIO_new(BIO_s_mem()));
  if (!bio || write(bio.get()) != 1) return openssl_failure(what);
  char* data = nullptr;
  const long len = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(len));
}

Result<std::string> pem_of(X509* cert) {
  return pem_text("a PEM certificate", [cert](BIO* b) { return PEM_write_bio_X509(b, cert); });
}

Result<std::string> pem_of(EVP_PKEY* key) {
  return pem_text("a PEM key", [key](BIO* b) {
    return PEM_write_bio_PrivateKey(b, key, nullptr, nullptr, 0, nullptr, nullptr);
  });
}

}  // namespace

Result<TlsOptions> make_job_tls(const JobTlsRequest& r) {
  if (r.token.empty()) return invalid_argument("the job's token is empty");
  if (r.job_id.empty()) return invalid_argument("--job-id is empty");
  if (r.names.empty()) return invalid_argument("--name: give the coordinator's address");
  if (r.valid_days < 1 || r.valid_days > 3650) {
    return invalid_argument("--valid-days " + std::to_string(r.valid_days) + ": not in 1..3650");
  }
  GP_ASSIGN_OR_RETURN(const std::string sans, alt_names(r.names));
  std::error_code ec;
  std::filesystem::create_directories(r.dir, ec);
  struct stat st {};
  if (ec || ::lstat(r.dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    return invalid_argument("--dir " + r.dir + ": not a directory that can be created" +
                            (ec ? ": " + ec.message() : std::string()));
  }
  if (::chmod(r.dir.c_str(), 0700) != 0) {
    return invalid_argument("--dir " + r.dir + ": " + std::strerror(errno));
  }

  GP_ASSIGN_OR_RETURN(KeyPtr ca_key, derived_ca_key(r));
  GP_ASSIGN_OR_RETURN(X509Ptr ca, new_certificate(ca_key.get(), "graphpipe CA for " + r.job_id,
                                                  nullptr, r.valid_days));
  GP_RETURN_IF_ERROR(add_extension(ca.get(), ca.get(), NID_basic_constraints, "critical,CA:TRUE"));
  GP_RETURN_IF_ERROR(add_extension(ca.get(), ca.get(), NID_key_usage, "critical,keyCertSign"));
  GP_RETURN_IF_ERROR(add_extension(ca.get(), ca.get(), NID_subject_key_identifier, "hash"));
  GP_RETURN_IF_ERROR(sign(ca.get(), ca_key.get()));

  KeyPtr key(EVP_EC_gen("P-256"));
  if (!key) return openssl_failure("the job certificate's key");
  GP_ASSIGN_OR_RETURN(X509Ptr cert, new_certificate(key.get(), r.job_id + " " + r.names.front(),
                                                    ca.get(), r.valid_days));
  GP_RETURN_IF_ERROR(add_extension(cert.get(), ca.get(), NID_basic_constraints, "CA:FALSE"));
  GP_RETURN_IF_ERROR(
      add_extension(cert.get(), ca.get(), NID_key_usage, "critical,digitalSignature"));
  GP_RETURN_IF_ERROR(
      add_extension(cert.get(), ca.get(), NID_ext_key_usage, "serverAuth,clientAuth"));
  GP_RETURN_IF_ERROR(add_extension(cert.get(), ca.get(), NID_subject_alt_name, sans));
  GP_RETURN_IF_ERROR(add_extension(cert.get(), ca.get(), NID_authority_key_identifier, "keyid"));
  GP_RETURN_IF_ERROR(sign(cert.get(), ca_key.get()));

  const auto dir = std::filesystem::absolute(r.dir, ec).lexically_normal();
  TlsOptions out{(dir / "cert.pem").string(), (dir / "key.pem").string(),
                 (dir / "ca.pem").string()};
  GP_ASSIGN_OR_RETURN(const std::string key_pem, pem_of(key.get()));
  GP_ASSIGN_OR_RETURN(const std::string cert_pem, pem_of(cert.get()));
  GP_ASSIGN_OR_RETURN(const std::string ca_pem, pem_of(ca.get()));
  GP_RETURN_IF_ERROR(write_private(out.key, key_pem));
  GP_RETURN_IF_ERROR(write_private(out.cert, cert_pem));
  GP_RETURN_IF_ERROR(write_private(out.ca, ca_pem));
  return out;
}

}  // namespace gp::exec
