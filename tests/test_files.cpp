// core/files: input files are read only when regular and within their cap, never blocking on a FIFO or
// device; replaced files never write through a symbolic link planted at the destination or beside it.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <set>
#include <string>

#include "core/files.hpp"

namespace pacheck {
namespace {

namespace fs = std::filesystem;

constexpr ReadLimit kSmall{64, "a test file"};

class FilesTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / fmt_name();
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const char* name) const { return (dir_ / name).string(); }
  static std::string fmt_name() {
    return "pacheck_test_files_" + std::to_string(::getpid()) + "_" +
           ::testing::UnitTest::GetInstance()->current_test_info()->name();
  }
  static void put(const std::string& p, const std::string& text) { std::ofstream(p, std::ios::binary) << text; }
  static std::string get(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  }
  /// The FileError reason `f` throws, or "" when it does not throw.
  template <class F>
  static std::string reason_of(F&& f) {
    try {
      f();
    } catch (const FileError& e) {
      EXPECT_NE(std::string(e.what()).find(e.path), std::string::npos) << "what() names the file";
      return e.reason;
    }
    return "";
  }
  fs::path dir_;
};

TEST_F(FilesTest, ReadsARegularFileWithinItsCap) {
  put(path("a"), "hello\n");
  EXPECT_EQ(read_regular_file(path("a"), kSmall), "hello\n");
  put(path("full"), std::string(64, 'x'));
  EXPECT_EQ(read_regular_file(path("full"), kSmall).size(), 64u);
}

TEST_F(FilesTest, RefusesAFileOverTheCapStatingIt) {
  put(path("big"), std::string(65, 'x'));
  EXPECT_EQ(reason_of([&] { read_regular_file(path("big"), kSmall); }),
            "is 65 bytes, over the 64 bytes limit for a test file");
  // A sparse file of 1 GiB is refused by its size, before anything is read or allocated.
  const std::string sparse = path("sparse");
  put(sparse, "");
  fs::resize_file(sparse, std::uintmax_t{1} << 30);
  EXPECT_EQ(reason_of([&] { read_regular_file(sparse, {16 << 20, "a suite file"}); }),
            "is 1073741824 bytes, over the 16 MiB limit for a suite file");
}

TEST_F(FilesTest, RefusesDevicesDirectoriesAndMissingFiles) {
  EXPECT_EQ(reason_of([&] { read_regular_file("/dev/zero", kSmall); }), "not a regular file (a character device)");
  EXPECT_EQ(reason_of([&] { read_regular_file(dir_.string(), kSmall); }), "not a regular file (a directory)");
  EXPECT_EQ(reason_of([&] { read_regular_file(path("none"), kSmall); }), "cannot open: No such file or directory");
}

TEST_F(FilesTest, AFifoIsRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(path("fifo").c_str(), 0600), 0);
  // No writer ever opens the FIFO: a reader that opened it would wait forever.
  auto reason = std::async(std::launch::async, [&] { return reason_of([&] { read_regular_file(path("fifo"), kSmall); }); });
  ASSERT_EQ(reason.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "read_regular_file blocked on a FIFO";
  EXPECT_EQ(reason.get(), "not a regular file (a FIFO)");
  auto append = std::async(std::launch::async, [&] { return reason_of([&] { ::close(open_for_append(path("fifo"), false)); }); });
  ASSERT_EQ(append.wait_for(std::chrono::seconds(10)), std::future_status::ready) << "open_for_append blocked on a FIFO";
  EXPECT_EQ(append.get(), "not a regular file (a FIFO)");
}

TEST_F(FilesTest, SymlinksFollowedOnlyWhenAllowed) {
  put(path("target"), "data");
  fs::create_symlink(path("target"), path("link"));
  EXPECT_EQ(read_regular_file(path("link"), kSmall), "data");
  EXPECT_NE(reason_of([&] { read_regular_file(path("link"), kSmall, Symlinks::refuse); }).find("is a symbolic link"),
            std::string::npos);
}

TEST_F(FilesTest, AtomicWriteReplacesAPlantedLinkAndLeavesItsTargetAlone) {
  put(path("outside"), "precious");
  fs::create_symlink(path("outside"), path("report.json"));
  // Links planted at the temporary names an older writer used are never followed either.
  fs::create_symlink(path("outside"), path("report.json.tmp"));
  write_file_atomically(path("report.json"), "new\n");
  EXPECT_EQ(get(path("outside")), "precious");
  EXPECT_FALSE(fs::is_symlink(path("report.json")));
  EXPECT_EQ(get(path("report.json")), "new\n");
  // Nothing but the planted files and the result: no temporary file is left behind.
  std::set<std::string> names;
  for (const auto& e : fs::directory_iterator(dir_)) names.insert(e.path().filename().string());
  EXPECT_EQ(names, (std::set<std::string>{"outside", "report.json", "report.json.tmp"}));
}

TEST_F(FilesTest, AtomicWriteFailureNamesTheFile) {
  const std::string reason = reason_of([&] { write_file_atomically(path("no/such/dir/f"), "x"); });
  EXPECT_NE(reason.find("cannot create a temporary file beside it: No such file or directory"), std::string::npos)
      << reason;
}

TEST_F(FilesTest, AppendNeverWritesThroughALink) {
  put(path("outside"), "precious");
  fs::create_symlink(path("outside"), path("results.jsonl"));
  EXPECT_NE(reason_of([&] { ::close(open_for_append(path("results.jsonl"), false)); }).find("is a symbolic link"),
            std::string::npos);
  EXPECT_EQ(get(path("outside")), "precious");
  // A fresh file replaces the link: the target is untouched, the new file is empty.
  const int fd = open_for_append(path("results.jsonl"), true);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, "line\n", 5), 5);
  ::close(fd);
  EXPECT_EQ(get(path("outside")), "precious");
  EXPECT_FALSE(fs::is_symlink(path("results.jsonl")));
  EXPECT_EQ(get(path("results.jsonl")), "line\n");
  const int again = open_for_append(path("results.jsonl"), false);
  ASSERT_EQ(::write(again, "two\n", 4), 4);
  ::close(again);
  EXPECT_EQ(get(path("results.jsonl")), "line\ntwo\n");
}

TEST(ByteSizeText, LargestExactUnit) {
  EXPECT_EQ(byte_size_text(512), "512 bytes");
  EXPECT_EQ(byte_size_text(16u << 20), "16 MiB");
  EXPECT_EQ(byte_size_text(std::uint64_t{4} << 30), "4 GiB");
  EXPECT_EQ(byte_size_text(1536), "1536 bytes");
  EXPECT_EQ(byte_size_text(3072), "3 KiB");
}

}  // namespace
}  // namespace pacheck
