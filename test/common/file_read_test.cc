// Reading files without blocking on what is not one: FIFOs, devices, sockets and directories are
// refused at once, naming the path and its kind.
#include "gp/common/file_read.h"

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace fs = std::filesystem;
using gp::FileReadOptions;
using gp::read_regular_file;
using gp::RegularFile;

namespace {

// A read that blocks (the bug: open() of a FIFO waits for a writer that never comes) ends the
// process with SIGALRM, failing the test instead of hanging it.
struct HangGuard {
  HangGuard() { alarm(20); }
  ~HangGuard() { alarm(0); }
};

fs::path fresh_dir() {
  // Short: a unix socket's path must fit in sun_path.
  const fs::path dir = fs::temp_directory_path() / ("gp-fr-" + std::to_string(getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p, std::ios::binary) << text;
}

std::string error_of(const gp::Result<std::string>& r) {
  REQUIRE_FALSE(r.ok());
  return r.status().message();
}

}  // namespace

TEST_CASE("a FIFO is refused at once, naming it, with no writer on the other end") {
  HangGuard guard;
  const fs::path dir = fresh_dir();
  const fs::path fifo = dir / "plan.pb";
  REQUIRE(mkfifo(fifo.c_str(), 0600) == 0);
  const auto r = read_regular_file(fifo.string());
  CHECK(r.status().code() == gp::StatusCode::kInvalidArgument);
  CHECK(error_of(r) == "'" + fifo.string() + "' is a FIFO, not a regular file");
  const auto opened = RegularFile::open(fifo.string());
  REQUIRE_FALSE(opened.ok());
  CHECK_THAT(opened.status().message(), Catch::Contains("is a FIFO"));
  fs::remove_all(dir);
}

TEST_CASE("a directory, a character device and a unix socket are refused naming their kind") {
  HangGuard guard;
  const fs::path dir = fresh_dir();
  CHECK(error_of(read_regular_file(dir.string())) ==
        "'" + dir.string() + "' is a directory, not a regular file");
  CHECK(error_of(read_regular_file("/dev/null")) ==
        "'/dev/null' is a character device, not a regular file");
  CHECK_THAT(error_of(read_regular_file("/dev/zero")), Catch::Contains("a character device"));

  const fs::path sock = dir / "s";
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, sock.c_str(), sizeof(addr.sun_path) - 1);
  REQUIRE(bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0);
  CHECK(error_of(read_regular_file(sock.string())) ==
        "'" + sock.string() + "' is a socket, not a regular file");
  close(fd);
  fs::remove_all(dir);
}

TEST_CASE("a regular file reads whole, through a symbolic link too, and a missing one is named") {
  const fs::path dir = fresh_dir();
  write(dir / "model.pbtxt", std::string("name: \"m\"\n\0tail", 15));
  fs::create_symlink("model.pbtxt", dir / "link.pbtxt");
  const auto whole = read_regular_file((dir / "model.pbtxt").string());
  REQUIRE(whole.ok());
  CHECK(*whole == std::string("name: \"m\"\n\0tail", 15));
  const auto via_link = read_regular_file((dir / "link.pbtxt").string());
  REQUIRE(via_link.ok());
  CHECK(*via_link == *whole);
  write(dir / "empty", "");
  const auto empty = read_regular_file((dir / "empty").string());
  REQUIRE(empty.ok());
  CHECK(empty->empty());

  const auto missing = read_regular_file((dir / "missing.pb").string());
  CHECK(missing.status().code() == gp::StatusCode::kNotFound);
  CHECK_THAT(error_of(missing), Catch::Contains("cannot open '" + (dir / "missing.pb").string() +
                                                "': No such file or directory"));
  fs::remove_all(dir);
}

TEST_CASE("no_follow refuses a symbolic link as the last component, naming it") {
  const fs::path dir = fresh_dir();
  write(dir / "op.bin", "x");
  fs::create_symlink(dir / "op.bin", dir / "link.bin");
  FileReadOptions strict;
  strict.no_follow = true;
  CHECK(read_regular_file((dir / "op.bin").string(), strict).ok());
  CHECK(error_of(read_regular_file((dir / "link.bin").string(), strict)) ==
        "'" + (dir / "link.bin").string() + "' is a symbolic link, not a regular file");
  fs::remove_all(dir);
}

TEST_CASE("a file over the size cap is refused naming its size, one at the cap reads") {
  const fs::path dir = fresh_dir();
  write(dir / "token", "0123456789");
  FileReadOptions small;
  small.max_bytes = 10;
  const auto at_cap = read_regular_file((dir / "token").string(), small);
  REQUIRE(at_cap.ok());
  CHECK(*at_cap == "0123456789");
  small.max_bytes = 9;
  CHECK(error_of(read_regular_file((dir / "token").string(), small)) ==
        "'" + (dir / "token").string() + "' is 10 bytes, more than the 9 allowed");
  fs::remove_all(dir);
}

TEST_CASE("an opened file reads at offsets and its descriptor is blocking and close-on-exec") {
  const fs::path dir = fresh_dir();
  write(dir / "data.bin", "abcdefgh");
  auto file = RegularFile::open((dir / "data.bin").string());
  REQUIRE(file.ok());
  CHECK(file->size() == 8);
  CHECK(file->path() == (dir / "data.bin").string());
  CHECK(*file->read_at(2, 3) == "cde");
  CHECK(*file->read_at(6, 10) == "gh");  // short only at the end
  CHECK(file->read_at(20, 4)->empty());
  const int flags = fcntl(file->fd(), F_GETFL);
  CHECK((flags & O_NONBLOCK) == 0);
  CHECK((fcntl(file->fd(), F_GETFD) & FD_CLOEXEC) != 0);
  RegularFile moved = std::move(*file);
  CHECK(*moved.read_all() == "abcdefgh");
  fs::remove_all(dir);
}
