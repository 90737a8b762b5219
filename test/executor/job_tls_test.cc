// The job's own TLS files (control/job_tls.h): two launchers holding one token derive one CA, so
// each trusts the other's certificate; another token's CA trusts neither. Checked with OpenSSL's
// own chain verification, for the purposes gRPC checks (server and client), and the address.
#include "control/job_tls.h"

#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509_vfy.h>
#include <openssl/x509v3.h>
#include <sys/stat.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

namespace gp::exec {
namespace {

namespace fs = std::filesystem;

struct TempDir {
  fs::path path;
  TempDir() {
    char tmpl[] = "/tmp/gp-job-tls-XXXXXX";
    path = ::mkdtemp(tmpl);
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::unique_ptr<X509, decltype(&X509_free)> load(const std::string& path) {
  FILE* f = std::fopen(path.c_str(), "r");
  REQUIRE(f != nullptr);
  X509* x = PEM_read_X509(f, nullptr, nullptr, nullptr);
  std::fclose(f);
  REQUIRE(x != nullptr);
  return {x, X509_free};
}

// Whether `cert` chains to `ca` for `purpose` (X509_PURPOSE_SSL_SERVER/CLIENT), naming `ip`.
bool verifies(const std::string& cert, const std::string& ca, int purpose, const char* ip) {
  auto leaf = load(cert);
  auto root = load(ca);
  std::unique_ptr<X509_STORE, decltype(&X509_STORE_free)> store(X509_STORE_new(), X509_STORE_free);
  X509_STORE_add_cert(store.get(), root.get());
  std::unique_ptr<X509_STORE_CTX, decltype(&X509_STORE_CTX_free)> ctx(X509_STORE_CTX_new(),
                                                                      X509_STORE_CTX_free);
  X509_STORE_CTX_init(ctx.get(), store.get(), leaf.get(), nullptr);
  X509_STORE_CTX_set_purpose(ctx.get(), purpose);
  if (ip != nullptr) X509_VERIFY_PARAM_set1_ip_asc(X509_STORE_CTX_get0_param(ctx.get()), ip);
  return X509_verify_cert(ctx.get()) == 1;
}

JobTlsRequest request(const fs::path& dir, const std::string& token, const std::string& name) {
  JobTlsRequest r;
  r.token = token;
  r.job_id = "job-0123456789abcdef";
  r.names = {name, "node0"};
  r.dir = dir.string();
  return r;
}

TEST_CASE("two launchers with one token trust each other's certificates, another token's not") {
  TempDir tmp;
  auto node0 = make_job_tls(request(tmp.path / "node0", "the-job-token", "10.1.0.1"));
  auto node1 = make_job_tls(request(tmp.path / "node1", "the-job-token", "10.1.0.2"));
  auto other = make_job_tls(request(tmp.path / "other", "another-token", "10.1.0.1"));
  INFO(node0.status().to_string());
  REQUIRE(node0.ok());
  REQUIRE(node1.ok());
  REQUIRE(other.ok());
  // Rank 0's coordinator serves node0's certificate; node 1's ranks check it with their CA file.
  CHECK(verifies(node0->cert, node1->ca, X509_PURPOSE_SSL_SERVER, "10.1.0.1"));
  CHECK(verifies(node1->cert, node0->ca, X509_PURPOSE_SSL_CLIENT, nullptr));
  CHECK_FALSE(verifies(node0->cert, node1->ca, X509_PURPOSE_SSL_SERVER, "10.1.0.2"));
  CHECK_FALSE(verifies(other->cert, node0->ca, X509_PURPOSE_SSL_CLIENT, nullptr));
  CHECK_FALSE(verifies(node0->cert, other->ca, X509_PURPOSE_SSL_SERVER, "10.1.0.1"));
  // The files pass the checks every rank makes, and the key is its owner's only.
  CHECK(check_tls(*node0, TlsRole::kServerAndClient).ok());
  struct stat st {};
  REQUIRE(::stat(node0->key.c_str(), &st) == 0);
  CHECK((st.st_mode & 077) == 0);
  REQUIRE(::stat((tmp.path / "node0").c_str(), &st) == 0);
  CHECK((st.st_mode & 0777) == 0700);
}

TEST_CASE("a job's TLS files are refused for a bad name, an empty token or an unwritable dir") {
  TempDir tmp;
  auto bad_name = make_job_tls(request(tmp.path / "a", "token", "host name; rm"));
  REQUIRE_FALSE(bad_name.ok());
  CHECK_THAT(bad_name.status().message(), Catch::Contains("--name 'host name; rm'"));
  auto no_token = make_job_tls(request(tmp.path / "b", "", "10.1.0.1"));
  REQUIRE_FALSE(no_token.ok());
  CHECK_THAT(no_token.status().message(), Catch::Contains("token is empty"));
  const fs::path file = tmp.path / "file";
  std::fclose(std::fopen(file.c_str(), "w"));
  auto not_dir = make_job_tls(request(file, "token", "10.1.0.1"));
  REQUIRE_FALSE(not_dir.ok());
  CHECK_THAT(not_dir.status().message(), Catch::Contains("--dir " + file.string()));
}

}  // namespace
}  // namespace gp::exec
