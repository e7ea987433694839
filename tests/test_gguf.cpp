// GGUF reader and writer: round trips, typed getters, real files, and
// corrupted / hostile input (truncation, bit flips, absurd values written at
// the exact spots of a valid file).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>

#include <malloc.h>

#include "core/error.h"
#include "gguf/gguf.h"
#include "gguf_sample.h"
#include "test_util.h"

using namespace infer;

namespace {

using infer_test::pattern_bytes;
using infer_test::sample_writer;
using infer_test::scalar_f;
using infer_test::scalar_i;
using infer_test::scalar_u;

std::unique_ptr<GgufFile> parse(const std::vector<uint8_t>& b) {
  return GgufFile::from_memory(b.data(), b.size());
}

// Status of parsing `b` (Ok when it parses); the message goes to *msg.
Status parse_status(const std::vector<uint8_t>& b, std::string* msg = nullptr) {
  try {
    parse(b);
  } catch (const Error& e) {
    if (msg) *msg = e.what();
    return e.status();
  }
  return Status::Ok;
}

size_t find_bytes(const std::vector<uint8_t>& hay, const std::string& needle) {
  auto it = std::search(hay.begin(), hay.end(), needle.begin(), needle.end());
  REQUIRE(it != hay.end());
  return static_cast<size_t>(it - hay.begin());
}

template <typename T>
void poke(std::vector<uint8_t>& b, size_t pos, T v) {
  REQUIRE(pos + sizeof(T) <= b.size());
  std::memcpy(b.data() + pos, &v, sizeof(T));
}

// Where the parts of a metadata pair / tensor info of the sample file sit.
size_t key_len_at(const std::vector<uint8_t>& b, const std::string& key) {
  return find_bytes(b, key) - 8;
}
size_t value_type_at(const std::vector<uint8_t>& b, const std::string& key) {
  return find_bytes(b, key) + key.size();
}
size_t value_at(const std::vector<uint8_t>& b, const std::string& key) {
  return value_type_at(b, key) + 4;
}
size_t n_dims_at(const std::vector<uint8_t>& b, const std::string& tensor) {
  return find_bytes(b, tensor) + tensor.size();
}
size_t dim_at(const std::vector<uint8_t>& b, const std::string& tensor, int d) {
  return n_dims_at(b, tensor) + 4 + 8 * static_cast<size_t>(d);
}
size_t tensor_type_at(const std::vector<uint8_t>& b, const std::string& tensor, int n_dims) {
  return dim_at(b, tensor, n_dims);
}

// Fails unless `b` gives exactly this status and, if given, a message containing `part`.
void expect_error(const std::vector<uint8_t>& b, Status want, const std::string& part = "") {
  std::string msg;
  const Status got = parse_status(b, &msg);
  INFO("message: " << msg);
  REQUIRE(got == want);
  if (!part.empty()) REQUIRE(msg.find(part) != std::string::npos);
}

// Everything a consumer might touch of a parsed file (lets ASan see any
// out-of-bounds pointer), then a write/read round trip of it.
void exercise(const GgufFile& f) {
  unsigned sum = 0;
  for (const GgufTensorInfo& t : f.tensors()) {
    const uint8_t* p = f.tensor_data(t);
    sum += p[0] + p[t.nbytes - 1];
    CHECK(t.n_rows() * t.dims[0] == t.n_elements());
  }
  (void)sum;
  GgufWriter w(f.version());
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  for (const GgufTensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.dims, t.type, f.tensor_data(t), t.nbytes);
  }
  const auto bytes = w.to_bytes();
  const auto g = parse(bytes);
  REQUIRE(g->metadata() == f.metadata());
  REQUIRE(g->tensors().size() == f.tensors().size());
  for (size_t i = 0; i < f.tensors().size(); ++i) {
    const GgufTensorInfo& a = f.tensors()[i];
    const GgufTensorInfo& b = g->tensors()[i];
    REQUIRE(a.name == b.name);
    REQUIRE(a.dims == b.dims);
    REQUIRE(a.type == b.type);
    REQUIRE(std::memcmp(f.tensor_data(a), g->tensor_data(b), a.nbytes) == 0);
  }
}

// Writes every kv and tensor of a file into a writer and serializes it.
std::vector<uint8_t> rewrite(const GgufFile& f) {
  GgufWriter w(f.version());
  for (const auto& [k, v] : f.metadata()) w.set(k, v);
  for (const GgufTensorInfo& t : f.tensors()) {
    w.add_tensor(t.name, t.dims, t.type, f.tensor_data(t), t.nbytes);
  }
  return w.to_bytes();
}

}  // namespace

TEST_CASE("gguf: writer output reads back identically", "[gguf]") {
  for (uint32_t version : {2u, 3u}) {
    const GgufWriter w = sample_writer(version);
    const auto bytes = w.to_bytes();
    const auto f = parse(bytes);
    CHECK(f->version() == version);
    CHECK(f->alignment() == 32);
    CHECK(f->data_offset() % 32 == 0);
    REQUIRE(f->metadata().size() == 20);
    CHECK(f->metadata()[0].first == "general.architecture");
    CHECK(f->metadata()[19].first == "test.empty_array");

    // Every value, compared exactly (NaN bits and -0.0 included).
    CHECK(*f->find("test.u8") == scalar_u(GgufType::U8, 200));
    CHECK(*f->find("test.i8") == scalar_i(GgufType::I8, -100));
    CHECK(*f->find("test.u16") == scalar_u(GgufType::U16, 60000));
    CHECK(*f->find("test.i16") == scalar_i(GgufType::I16, -30000));
    CHECK(*f->find("test.u64") == GgufValue::make_u64((1ull << 63) + 5));
    CHECK(*f->find("test.i64") == scalar_i(GgufType::I64, -(1ll << 62)));
    CHECK(*f->find("test.f64") == scalar_f(GgufType::F64, -2.25e300));
    CHECK(*f->find("test.floats") ==
          GgufValue::make_f32_array({1.0f, -0.0f, std::numeric_limits<float>::quiet_NaN()}));
    CHECK(!(*f->find("test.floats") == GgufValue::make_f32_array({1.0f, 0.0f, 0.0f})));
    const GgufValue* nested = f->find("test.nested");
    REQUIRE(nested);
    CHECK(nested->elem == GgufType::Array);
    REQUIRE(nested->size() == 3);
    CHECK(nested->at(0).elem == GgufType::U16);
    CHECK(nested->at(0).at(1).u == 2);
    CHECK(nested->at(0).int_at(1) == 2);
    CHECK(nested->at(2).empty());
    CHECK(f->find("test.nested_strings")->at(0).string_at(1) == "yy");
    CHECK(f->find("test.nested_strings")->at(0).at(1).s == "yy");

    REQUIRE(f->tensors().size() == 4);
    const GgufTensorInfo* q4 = f->find_tensor("tensor.q4");
    REQUIRE(q4);
    CHECK(q4->dims == std::vector<int64_t>{64, 2});
    CHECK(q4->type == DType::Q4_0);
    CHECK(q4->nbytes == 72);
    CHECK(q4->n_rows() == 2);
    CHECK(q4->offset == 0);
    CHECK(std::memcmp(f->tensor_data(*q4), pattern_bytes(72, 1).data(), 72) == 0);
    const GgufTensorInfo* f16 = f->find_tensor("tensor.f16");
    CHECK(f16->offset == 96);  // 72 rounded up to 32
    CHECK(std::memcmp(f->tensor_data(*f16), pattern_bytes(30, 2).data(), 30) == 0);
    const GgufTensorInfo* q6k = f->find_tensor("tensor.q6k");
    CHECK(q6k->nbytes == 210);
    CHECK(std::memcmp(f->tensor_data(*q6k), pattern_bytes(210, 3).data(), 210) == 0);
    const GgufTensorInfo* f32 = f->find_tensor("tensor.f32");
    CHECK(f32->dims == std::vector<int64_t>{8, 2, 1, 2});
    CHECK(f32->n_elements() == 32);
    CHECK(f32->n_rows() == 4);
    CHECK(std::memcmp(f->tensor_data(*f32), pattern_bytes(128, 4).data(), 128) == 0);
    CHECK(f->data_offset() + f32->offset + 128 == bytes.size());
    CHECK(f->find_tensor("missing") == nullptr);
    CHECK(f->find("missing") == nullptr);

    // Writing what was read gives the same bytes.
    CHECK(rewrite(*f) == bytes);
    exercise(*f);
  }
}

TEST_CASE("gguf: custom alignment, no tensors, set() replaces", "[gguf]") {
  GgufWriter w;
  w.set("general.alignment", GgufValue::make_u32(64));
  w.set("a", GgufValue::make_u32(1));
  w.set("a", GgufValue::make_string("two"));  // replaced in place, still one key
  const auto t = pattern_bytes(4, 9);
  w.add_tensor("x", {1}, DType::F32, t.data(), 4);
  w.add_tensor("y", {2}, DType::I16, t.data(), 4);
  const auto bytes = w.to_bytes();
  const auto f = parse(bytes);
  CHECK(f->alignment() == 64);
  CHECK(f->metadata().size() == 2);
  CHECK(f->get_string("a") == "two");
  CHECK(f->data_offset() % 64 == 0);
  CHECK(f->find_tensor("y")->offset == 64);
  CHECK(bytes.size() == f->data_offset() + 128);  // every tensor, the last too, is padded

  GgufWriter empty;
  empty.set("k", GgufValue::make_bool(false));
  const auto eb = empty.to_bytes();
  CHECK(eb.size() == 4 + 4 + 8 + 8 + (8 + 1) + 4 + 1);  // no padding without tensors
  const auto ef = parse(eb);
  CHECK(ef->tensors().empty());
  CHECK(ef->get_bool("k") == false);
}

TEST_CASE("gguf: typed getters", "[gguf]") {
  const auto bytes = sample_writer().to_bytes();
  const auto f = parse(bytes);
  auto status = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.status();
    }
    return Status::Ok;
  };
  CHECK(f->get_string("general.architecture") == "llama");
  CHECK(f->get_string("test.string") == "h\xC3\xA9llo \xE2\x96\x81 world");
  CHECK(f->get_string("nope") == std::nullopt);
  CHECK(f->get_int("test.u8") == 200);
  CHECK(f->get_int("test.i8") == -100);
  CHECK(f->get_int("test.u32") == 4000000000ll);
  CHECK(f->get_int("test.i64") == -(1ll << 62));
  CHECK(f->get_int("nope") == std::nullopt);
  CHECK(f->get_float("test.f32") == 1.5);
  CHECK(f->get_float("test.f64") == -2.25e300);
  CHECK(f->get_float("test.i16") == -30000.0);  // integers are numbers too
  CHECK(f->get_bool("test.bool") == true);
  CHECK(f->get_string_array("test.strings") == std::vector<std::string>{"a", "", "ccc"});
  CHECK(f->get_string_array("nope").empty());
  CHECK(f->get_int_array("test.ints") == std::vector<int64_t>{-1, 0, 2147483647});
  CHECK(f->get_f32_array("test.ints") == std::vector<float>{-1.0f, 0.0f, 2147483647.0f});
  const auto fl = f->get_f32_array("test.floats");
  REQUIRE(fl.size() == 3);
  CHECK(std::signbit(fl[1]));
  CHECK(std::isnan(fl[2]));
  CHECK(f->get_array("test.nested")->size() == 3);
  CHECK(f->get_array("nope") == nullptr);

  CHECK(status([&] { f->get_string("test.u32"); }) == Status::Format);
  CHECK(status([&] { f->get_int("test.f32"); }) == Status::Format);
  CHECK(status([&] { f->get_int("test.u64"); }) == Status::Format);  // > INT64_MAX
  CHECK(status([&] { f->get_int("test.bool"); }) == Status::Format);
  CHECK(status([&] { f->get_float("test.string"); }) == Status::Format);
  CHECK(status([&] { f->get_bool("test.u8"); }) == Status::Format);
  CHECK(status([&] { f->get_array("test.u8"); }) == Status::Format);
  CHECK(status([&] { f->get_string_array("test.ints"); }) == Status::Format);
  CHECK(status([&] { f->get_int_array("test.floats"); }) == Status::Format);
  CHECK(status([&] { f->get_f32_array("test.strings"); }) == Status::Format);
  CHECK(status([&] { f->get_int_array("test.nested"); }) == Status::Format);
  try {
    f->get_string("test.u32");
  } catch (const Error& e) {
    CHECK(std::string(e.what()).find("test.u32") != std::string::npos);
  }

  CHECK(f->find("test.u8")->as_float() == 200.0);
  CHECK(scalar_f(GgufType::F32, 3.0).as_int() == 3);
  CHECK(status([] { scalar_f(GgufType::F32, 3.5).as_int(); }) == Status::Format);
  CHECK(status([] { scalar_f(GgufType::F64, 1e300).as_int(); }) == Status::Format);
  CHECK(status([] { scalar_f(GgufType::F64, NAN).as_int(); }) == Status::Format);
  CHECK(status([] { GgufValue::make_string("1").as_int(); }) == Status::Format);
  CHECK(GgufValue::make_bool(true).as_int() == 1);
  CHECK(gguf_type_name(GgufType::Array) == std::string("array"));
}

TEST_CASE("gguf: writer rejects invalid input", "[gguf]") {
  auto status = [](auto&& fn) {
    try {
      fn();
    } catch (const Error& e) {
      return e.status();
    }
    return Status::Ok;
  };
  const auto d = pattern_bytes(1024, 0);
  GgufWriter w;
  w.add_tensor("t", {32}, DType::Q8_0, d.data(), 34);
  CHECK(status([&] { w.add_tensor("t", {32}, DType::Q8_0, d.data(), 34); }) == Status::InvalidArgument);
  CHECK(status([&] { w.add_tensor("u", {32}, DType::Q8_0, d.data(), 33); }) == Status::InvalidArgument);
  CHECK(status([&] { w.add_tensor("u", {16}, DType::Q8_0, d.data(), 17); }) == Status::InvalidArgument);
  CHECK(status([&] { w.add_tensor("u", {}, DType::F32, d.data(), 4); }) == Status::InvalidArgument);
  CHECK(status([&] { w.add_tensor("u", {1, 1, 1, 1, 1}, DType::F32, d.data(), 4); }) == Status::InvalidArgument);
  CHECK(status([&] { w.add_tensor("u", {0}, DType::F32, d.data(), 0); }) == Status::InvalidArgument);
  CHECK(status([&] { w.add_tensor("u", {-4}, DType::F32, d.data(), 4); }) == Status::InvalidArgument);
  CHECK(status([&] { w.add_tensor("u", {1ll << 62, 4}, DType::F32, d.data(), 4); }) == Status::InvalidArgument);
  CHECK(status([&] { w.add_tensor("u", {1}, static_cast<DType>(1000), d.data(), 4); }) == Status::InvalidArgument);

  auto bad_kv = [&](GgufValue v) {
    GgufWriter x;
    x.set("k", std::move(v));
    return status([&] { x.to_bytes(); });
  };
  CHECK(bad_kv(scalar_u(GgufType::U8, 256)) == Status::InvalidArgument);
  CHECK(bad_kv(scalar_i(GgufType::I16, 40000)) == Status::InvalidArgument);
  CHECK(bad_kv(scalar_u(GgufType::Bool, 2)) == Status::InvalidArgument);
  CHECK(bad_kv(GgufValue::make_array(GgufType::U32, {GgufValue::make_i32(1)})) == Status::InvalidArgument);
  CHECK(bad_kv(scalar_u(static_cast<GgufType>(77), 0)) == Status::InvalidArgument);
  GgufWriter bad_align;
  bad_align.set("general.alignment", GgufValue::make_u32(48));
  CHECK(status([&] { bad_align.to_bytes(); }) == Status::InvalidArgument);
  CHECK(status([] { GgufWriter(1).to_bytes(); }) == Status::InvalidArgument);
}

TEST_CASE("gguf: write() to disk and open() it, with and without mmap", "[gguf]") {
  const std::string path = infer_test::temp_dir() + "/sample.gguf";
  const GgufWriter w = sample_writer();
  w.write(path);
  CHECK(infer_test::read_file(path) == w.to_bytes());
  for (bool mmap : {true, false}) {
    const auto f = GgufFile::open(path, mmap);
    CHECK(f->tensors().size() == 4);
    exercise(*f);
  }
  try {
    GgufFile::open(infer_test::temp_dir() + "/does-not-exist.gguf");
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.status() == Status::Io);
  }
  CHECK_THROWS_AS(w.write(infer_test::temp_dir() + "/no/such/dir/x.gguf"), Error);
  // A parse error names the file.
  std::vector<uint8_t> junk(64, 'x');
  const std::string jpath = infer_test::temp_dir() + "/junk.gguf";
  std::ofstream(jpath, std::ios::binary).write(reinterpret_cast<const char*>(junk.data()), 64);
  REQUIRE(infer_test::read_file(jpath) == junk);
  try {
    GgufFile::open(jpath);
    FAIL("no error");
  } catch (const Error& e) {
    CHECK(e.status() == Status::Format);
    CHECK(std::string(e.what()).find(jpath) != std::string::npos);
  }
}

TEST_CASE("gguf: every truncation is a Format error", "[gguf]") {
  const auto bytes = sample_writer().to_bytes();
  for (size_t len = 0; len < bytes.size(); ++len) {
    const std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<long>(len));
    std::string msg;
    INFO("length " << len);
    REQUIRE(parse_status(cut, &msg) == Status::Format);
    REQUIRE(!msg.empty());
  }
  CHECK(parse_status(bytes) == Status::Ok);
}

TEST_CASE("gguf: flipped bits either parse or fail cleanly", "[gguf]") {
  const auto bytes = sample_writer().to_bytes();
  size_t ok = 0, failed = 0;
  for (size_t pos = 0; pos < bytes.size(); ++pos) {
    for (int bit = 0; bit < 8; ++bit) {
      auto b = bytes;
      b[pos] ^= static_cast<uint8_t>(1u << bit);
      INFO("byte " << pos << " bit " << bit);
      std::unique_ptr<GgufFile> f;
      try {
        f = parse(b);
      } catch (const Error&) {
        ++failed;
        continue;
      }
      ++ok;
      exercise(*f);
    }
  }
  CHECK(ok > 0);
  CHECK(failed > 0);
}

TEST_CASE("gguf: header errors", "[gguf]") {
  const auto good = sample_writer().to_bytes();
  expect_error({}, Status::Format, "not a GGUF file");
  expect_error({'G', 'G', 'U'}, Status::Format, "not a GGUF file");
  auto b = good;
  b[3] = 'X';
  expect_error(b, Status::Format, "not a GGUF file");
  for (uint32_t v : {0u, 1u, 4u, 99u, 0xFFFFFFFFu}) {
    b = good;
    poke<uint32_t>(b, 4, v);
    expect_error(b, Status::Unsupported, "version");
  }
  b = good;
  poke<uint32_t>(b, 4, 0x03000000u);
  expect_error(b, Status::Unsupported, "big-endian");
  b = good;
  poke<uint64_t>(b, 8, 1ull << 60);  // tensor count
  expect_error(b, Status::Format, "tensor count");
  b = good;
  poke<uint64_t>(b, 16, 1ull << 60);  // metadata count
  expect_error(b, Status::Format, "metadata count");
  b = good;
  poke<uint64_t>(b, 16, ~0ull);
  expect_error(b, Status::Format, "metadata count");
  b = good;
  poke<uint64_t>(b, 8, 5);  // one tensor info more than there is: reads into the data
  CHECK(parse_status(b) == Status::Format);
}

TEST_CASE("gguf: metadata errors", "[gguf]") {
  const auto good = sample_writer().to_bytes();
  auto b = good;
  poke<uint64_t>(b, key_len_at(b, "test.u16"), 1ull << 62);
  expect_error(b, Status::Format, "key");
  b = good;
  poke<uint64_t>(b, key_len_at(b, "test.u16"), ~0ull);
  expect_error(b, Status::Format, "key");
  b = good;
  poke<uint64_t>(b, value_at(b, "test.string"), 1ull << 60);
  expect_error(b, Status::Format, "test.string");
  b = good;
  poke<uint32_t>(b, value_type_at(b, "test.u32"), 13);
  expect_error(b, Status::Format, "unknown value type 13");
  b = good;
  poke<uint32_t>(b, value_type_at(b, "test.u32"), 0x80000000u);
  expect_error(b, Status::Format, "unknown value type");
  b = good;
  poke<uint8_t>(b, value_at(b, "test.bool"), 2);
  expect_error(b, Status::Format, "bool");
  // Arrays: element type, then length.
  b = good;
  poke<uint32_t>(b, value_at(b, "test.ints"), 99);
  expect_error(b, Status::Format, "element type");
  for (uint64_t n : {1ull << 40, 1ull << 62, ~0ull}) {
    b = good;
    poke<uint64_t>(b, value_at(b, "test.ints") + 4, n);  // 3 i32 -> absurd counts
    expect_error(b, Status::Format, "test.ints");
  }
  b = good;
  poke<uint64_t>(b, value_at(b, "test.strings") + 4, 1ull << 61);
  expect_error(b, Status::Format, "array length");
  b = good;
  poke<uint64_t>(b, value_at(b, "test.nested") + 4, 1ull << 59);
  expect_error(b, Status::Format, "array length");
  // Duplicate key: rename test.i16 to test.u16.
  b = good;
  b[find_bytes(b, "test.i16") + 5] = 'u';
  expect_error(b, Status::Format, "duplicate key");
}

TEST_CASE("gguf: deeply nested arrays are refused, not recursed into", "[gguf]") {
  std::vector<uint8_t> b;
  auto put32 = [&](uint32_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4); };
  auto put64 = [&](uint64_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8); };
  b = {'G', 'G', 'U', 'F'};
  put32(3);
  put64(0);  // tensors
  put64(1);  // kv
  put64(4);
  b.insert(b.end(), {'d', 'e', 'e', 'p'});
  put32(9);  // array
  for (int i = 0; i < 10000; ++i) {
    put32(9);  // of arrays
    put64(1);
  }
  put32(4);
  put64(1);
  put32(7);
  expect_error(b, Status::Format, "nested");
}

namespace {

// A file of one metadata pair `key` holding an array whose header (element
// type, count) and element bytes are given.
std::vector<uint8_t> one_array_file(GgufType elem, uint64_t count, size_t body_bytes, uint8_t fill = 0) {
  std::vector<uint8_t> b = {'G', 'G', 'U', 'F'};
  auto put32 = [&](uint32_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 4); };
  auto put64 = [&](uint64_t v) { b.insert(b.end(), reinterpret_cast<uint8_t*>(&v), reinterpret_cast<uint8_t*>(&v) + 8); };
  put32(3);
  put64(0);  // tensors
  put64(1);  // kv
  put64(3);
  b.insert(b.end(), {'b', 'i', 'g'});
  put32(static_cast<uint32_t>(GgufType::Array));
  put32(static_cast<uint32_t>(elem));
  put64(count);
  b.resize(b.size() + body_bytes, fill);
  return b;
}

template <typename F>
Status status_of(F&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.status();
  }
  return Status::Ok;
}

// Bytes in use on the heap (glibc), or -1 where allocations are intercepted.
long long heap_in_use() {
#if defined(__SANITIZE_ADDRESS__)
  return -1;
#endif
#if defined(__clang__) && defined(__has_feature)
#if __has_feature(address_sanitizer)
  return -1;
#endif
#endif
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  const struct mallinfo2 mi = mallinfo2();
  return static_cast<long long>(mi.uordblks + mi.hblkhd);
#else
  return -1;
#endif
}

}  // namespace

TEST_CASE("gguf: huge arrays cost about their file bytes in memory", "[gguf]") {
  // 50M u8 elements: 50 MB of file must not become gigabytes of values.
  const uint64_t n = 50'000'000;
  const std::vector<uint8_t> b = one_array_file(GgufType::U8, n, n, 7);
  const long long before = heap_in_use();
  const auto f = parse(b);
  const long long after = heap_in_use();
  const GgufValue* v = f->find("big");
  REQUIRE(v);
  CHECK(v->elem == GgufType::U8);
  REQUIRE(v->size() == n);
  CHECK(v->at(n - 1).u == 7);
  CHECK(v->int_at(12345) == 7);
  CHECK(v->raw()[n / 2] == 7);
  CHECK(v->memory_bytes() < n + 4096);
  if (before >= 0 && after >= 0) {
    INFO("heap growth " << (after - before) << " bytes");
    CHECK(after - before < static_cast<long long>(n + (8 << 20)));
  }
  // Writing it back streams the same bytes.
  GgufWriter w;
  w.set("big", *v);
  CHECK(w.to_bytes() == b);

  // 5M empty strings: 8 bytes each in the file, 8 bytes each in memory.
  const uint64_t ns = 5'000'000;
  const auto g = parse(one_array_file(GgufType::String, ns, ns * 8));
  const GgufValue* sv = g->find("big");
  REQUIRE(sv->size() == ns);
  CHECK(sv->string_at(ns - 1).empty());
  CHECK(sv->memory_bytes() < ns * 8 + 4096);

  // Nested empty arrays cost far more in memory than their 12 file bytes:
  // millions of them are refused before they are allocated.
  const uint64_t nn = 4'000'000;
  std::vector<uint8_t> nb = one_array_file(GgufType::Array, nn, 0);
  for (uint64_t k = 0; k < nn; ++k) {
    const uint32_t elem = static_cast<uint32_t>(GgufType::U8);
    const uint64_t zero = 0;
    nb.insert(nb.end(), reinterpret_cast<const uint8_t*>(&elem), reinterpret_cast<const uint8_t*>(&elem) + 4);
    nb.insert(nb.end(), reinterpret_cast<const uint8_t*>(&zero), reinterpret_cast<const uint8_t*>(&zero) + 8);
  }
  expect_error(nb, Status::Format, "memory");
  // A few thousand are fine.
  std::vector<uint8_t> few = one_array_file(GgufType::Array, 3000, 0);
  for (int k = 0; k < 3000; ++k) {
    const uint32_t elem = static_cast<uint32_t>(GgufType::U8);
    const uint64_t zero = 0;
    few.insert(few.end(), reinterpret_cast<const uint8_t*>(&elem), reinterpret_cast<const uint8_t*>(&elem) + 4);
    few.insert(few.end(), reinterpret_cast<const uint8_t*>(&zero), reinterpret_cast<const uint8_t*>(&zero) + 8);
  }
  CHECK(parse(few)->find("big")->size() == 3000);
}

TEST_CASE("gguf: compact arrays keep values exactly", "[gguf]") {
  // Every element type through make_array, the writer and the reader.
  GgufWriter w;
  w.set("u8", GgufValue::make_array(GgufType::U8, {scalar_u(GgufType::U8, 0), scalar_u(GgufType::U8, 255)}));
  w.set("i16", GgufValue::make_array(GgufType::I16, {scalar_i(GgufType::I16, -32768), scalar_i(GgufType::I16, 7)}));
  w.set("u64", GgufValue::make_array(GgufType::U64, {GgufValue::make_u64(~0ull)}));
  w.set("f64", GgufValue::make_array(GgufType::F64, {scalar_f(GgufType::F64, -0.0), scalar_f(GgufType::F64, 1e300)}));
  w.set("bool", GgufValue::make_array(GgufType::Bool, {GgufValue::make_bool(true), GgufValue::make_bool(false)}));
  w.set("str", GgufValue::make_array(GgufType::String, {GgufValue::make_string("a\0b"), GgufValue::make_string("")}));
  const auto bytes = w.to_bytes();
  const auto f = parse(bytes);
  CHECK(f->find("u8")->at(1).u == 255);
  CHECK(f->get_int_array("u8") == std::vector<int64_t>{0, 255});
  CHECK(f->get_int_array("i16") == std::vector<int64_t>{-32768, 7});
  CHECK(f->find("u64")->at(0).u == ~0ull);
  CHECK(status_of([&] { f->get_int_array("u64"); }) == Status::Format);  // does not fit in int64
  CHECK(std::signbit(f->find("f64")->float_at(0)));
  CHECK(f->get_f32_array("i16") == std::vector<float>{-32768.0f, 7.0f});
  CHECK(f->find("bool")->int_at(0) == 1);
  CHECK(f->get_string_array("str") == std::vector<std::string>{"a\0b", ""});
  for (const auto& [key, value] : f->metadata()) {
    INFO(key);
    CHECK(value == *f->find(key));
  }
  // Values and their parsed copies compare equal, built either way.
  CHECK(*f->find("u8") == GgufValue::make_raw_array(GgufType::U8, {0, 255}));
  CHECK(!(*f->find("u8") == GgufValue::make_raw_array(GgufType::U8, {0, 254})));
  CHECK(*f->find("str") == GgufValue::make_string_array({"a\0b", ""}));
  CHECK(status_of([] { GgufValue::make_raw_array(GgufType::U16, {1, 2, 3}); }) == Status::InvalidArgument);
  CHECK(status_of([] { GgufValue::make_raw_array(GgufType::Bool, {2}); }) == Status::InvalidArgument);
  CHECK(status_of([] { GgufValue::make_raw_array(GgufType::String, {}); }) == Status::InvalidArgument);
  CHECK(status_of([&] { f->find("u8")->at(2); }) == Status::InvalidArgument);
  // Bad elements are kept as given and refused by the writer.
  GgufWriter bad;
  bad.set("k", GgufValue::make_array(GgufType::String, {GgufValue::make_string("x"), GgufValue::make_u32(1)}));
  CHECK(status_of([&] { bad.to_bytes(); }) == Status::InvalidArgument);
  bad.set("k", GgufValue::make_array(GgufType::U8, {scalar_u(GgufType::U8, 256)}));
  CHECK(status_of([&] { bad.to_bytes(); }) == Status::InvalidArgument);
  // A bool array element that is neither 0 nor 1 is a format error.
  std::vector<uint8_t> bb = one_array_file(GgufType::Bool, 3, 3, 1);
  bb.back() = 2;
  expect_error(bb, Status::Format, "neither 0 nor 1");
}

TEST_CASE("gguf: alignment errors", "[gguf]") {
  GgufWriter w = sample_writer();
  w.set("general.alignment", GgufValue::make_u32(64));
  const auto good = w.to_bytes();
  REQUIRE(parse(good)->alignment() == 64);
  for (uint32_t a : {0u, 3u, 48u, 0xFFFFFFFFu}) {
    auto b = good;
    poke<uint32_t>(b, value_at(b, "general.alignment"), a);
    expect_error(b, Status::Format, "general.alignment");
  }
  auto b = good;
  poke<uint32_t>(b, value_type_at(b, "general.alignment"), static_cast<uint32_t>(GgufType::F32));
  expect_error(b, Status::Format, "general.alignment");
  b = good;
  poke<uint32_t>(b, value_type_at(b, "general.alignment"), static_cast<uint32_t>(GgufType::I32));
  CHECK(parse_status(b) == Status::Ok);  // any integer type holding a power of two is accepted
  poke<int32_t>(b, value_at(b, "general.alignment"), -64);
  expect_error(b, Status::Format, "general.alignment");
  // With 128, tensor.q6k's offset 192 is no longer aligned.
  b = good;
  poke<uint32_t>(b, value_at(b, "general.alignment"), 128);
  expect_error(b, Status::Format, "not a multiple of the alignment");
}

TEST_CASE("gguf: tensor info errors", "[gguf]") {
  const auto good = sample_writer().to_bytes();
  auto b = good;
  for (uint32_t n : {0u, 5u, 0x80000000u, 0xFFFFFFFFu}) {
    b = good;
    poke<uint32_t>(b, n_dims_at(b, "tensor.q4"), n);
    expect_error(b, Status::Format, "tensor 0 'tensor.q4'");
  }
  for (uint64_t d : {0ull, 1ull << 63, ~0ull}) {
    b = good;
    poke<uint64_t>(b, dim_at(b, "tensor.f16", 1), d);
    expect_error(b, Status::Format, "tensor.f16");
  }
  // Element count overflow: 2^40 * 2^40 (each dim is fine alone).
  b = good;
  poke<uint64_t>(b, dim_at(b, "tensor.f32", 0), 1ull << 40);
  poke<uint64_t>(b, dim_at(b, "tensor.f32", 1), 1ull << 40);
  expect_error(b, Status::Format, "fit in int64");
  // Bytes overflow: 2^62 f32 elements is fine as a count, not as 2^64 bytes.
  b = good;
  poke<uint64_t>(b, dim_at(b, "tensor.f32", 0), 1ull << 60);
  poke<uint64_t>(b, dim_at(b, "tensor.f32", 1), 2);
  expect_error(b, Status::Format, "tensor.f32");
  // Huge but representable: past the end of the file.
  b = good;
  poke<uint64_t>(b, dim_at(b, "tensor.f16", 1), 1ull << 40);
  expect_error(b, Status::Format, "exceeds");
  // Row length not a multiple of the block size.
  b = good;
  poke<uint64_t>(b, dim_at(b, "tensor.q4", 0), 48);
  expect_error(b, Status::Format, "not a multiple of the q4_0 block size");
  // Types: unknown numbers are Format (naming the tensor), known ggml types we
  // cannot run are Unsupported.
  for (uint32_t t : {4u, 5u, 31u, 1000u, 0xFFFFFFFFu}) {
    b = good;
    poke<uint32_t>(b, tensor_type_at(b, "tensor.f16", 2), t);
    expect_error(b, Status::Format, "tensor 1 'tensor.f16': unknown tensor type");
  }
  b = good;
  poke<uint32_t>(b, tensor_type_at(b, "tensor.f16", 2), 16);
  expect_error(b, Status::Unsupported, "iq2_xxs");
  // Known types that cannot be dequantized still load.
  b = good;
  poke<uint32_t>(b, tensor_type_at(b, "tensor.f16", 2), static_cast<uint32_t>(DType::I16));
  CHECK(parse_status(b) == Status::Ok);
  // Offsets: misaligned, past the end, overflowing.
  const size_t off = tensor_type_at(good, "tensor.q6k", 1) + 4;
  b = good;
  poke<uint64_t>(b, off, 128 + 1);
  expect_error(b, Status::Format, "not a multiple of the alignment");
  b = good;
  poke<uint64_t>(b, off, 1ull << 40);
  expect_error(b, Status::Format, "tensor 'tensor.q6k': data offset 1099511627776 + 210 bytes exceeds");
  b = good;
  poke<uint64_t>(b, off, ~0ull - 31);  // aligned, and offset + size wraps around
  expect_error(b, Status::Format, "exceeds");
  b = good;
  poke<uint64_t>(b, off, 288);  // aligned, but 288 + 210 > the 480 bytes of data
  expect_error(b, Status::Format, "exceeds");
  // Tensor name length absurd.
  b = good;
  poke<uint64_t>(b, find_bytes(b, "tensor.q6k") - 8, 1ull << 60);
  expect_error(b, Status::Format, "name");
  // Duplicate tensor name: rename tensor.f32 to tensor.f16.
  b = good;
  const size_t at = find_bytes(b, "tensor.f32");
  b[at + 8] = '1';
  b[at + 9] = '6';
  expect_error(b, Status::Format, "duplicate tensor name");
}

TEST_CASE("gguf: hostile names are quoted safely in messages", "[gguf]") {
  GgufWriter w;
  const std::string name = std::string("bad\x01name") + std::string(300, 'z');
  const auto d = pattern_bytes(4, 0);
  w.add_tensor(name, {1}, DType::F32, d.data(), 4);
  auto b = w.to_bytes();
  poke<uint32_t>(b, find_bytes(b, name) + name.size(), 7);  // n_dims
  std::string msg;
  REQUIRE(parse_status(b, &msg) == Status::Format);
  CHECK(msg.find("bad\\x01name") != std::string::npos);
  CHECK(msg.size() < 400);
}

TEST_CASE("gguf: stories260K.gguf", "[gguf]") {
  REQUIRE_SHARED(path, "models/stories260K.gguf");
  const auto f = GgufFile::open(path);
  CHECK(f->version() == 3);
  CHECK(f->tensors().size() == 48);
  CHECK(f->get_string("general.architecture") == "llama");
  CHECK(f->get_int("llama.embedding_length") == 64);
  CHECK(f->get_int("llama.feed_forward_length") == 172);
  CHECK(f->get_int("llama.block_count") == 5);
  CHECK(f->get_int("llama.attention.head_count") == 8);
  CHECK(f->get_int("llama.attention.head_count_kv") == 4);
  CHECK(f->get_int("llama.rope.dimension_count") == 8);
  CHECK(f->get_float("llama.attention.layer_norm_rms_epsilon") == static_cast<double>(1e-5f));
  CHECK(f->get_int("tokenizer.ggml.bos_token_id") == 1);
  CHECK(f->get_int("tokenizer.ggml.seperator_token_id") == 0xFFFFFFFFll);  // "absent"
  const auto tokens = f->get_string_array("tokenizer.ggml.tokens");
  REQUIRE(tokens.size() == 512);
  CHECK(tokens[1] == "<s>");
  CHECK(tokens[3] == "<0x00>");
  CHECK(f->get_f32_array("tokenizer.ggml.scores").size() == 512);
  CHECK(f->get_int_array("tokenizer.ggml.token_type")[0] == 2);
  const GgufTensorInfo* emb = f->find_tensor("token_embd.weight");
  REQUIRE(emb);
  CHECK(emb->dims == std::vector<int64_t>{64, 512});
  CHECK(emb->type == DType::F32);
  CHECK(emb->nbytes == 64 * 512 * 4);
  CHECK(f->find_tensor("blk.4.ffn_down.weight")->dims == std::vector<int64_t>{172, 64});

  const auto original = infer_test::read_file(path);
  CHECK(rewrite(*f) == original);  // same layout as llama.cpp's writer: byte-identical

  // Cuts inside the header and the first tensor all fail cleanly.
  for (size_t len = 0; len < f->data_offset() + 64; len += 13) {
    const std::vector<uint8_t> cut(original.begin(), original.begin() + static_cast<long>(len));
    INFO("length " << len);
    REQUIRE(parse_status(cut) == Status::Format);
  }
}

TEST_CASE("gguf: llama-2-tiny-random.gguf", "[gguf]") {
  REQUIRE_SHARED(path, "models/llama-2-tiny-random.gguf");
  const auto f = GgufFile::open(path, false);
  CHECK(f->tensors().size() == 12);
  CHECK(f->get_int("llama.embedding_length") == 8);
  CHECK(f->get_string_array("tokenizer.ggml.tokens").size() == 32000);
  const GgufTensorInfo* emb = f->find_tensor("token_embd.weight");
  REQUIRE(emb);
  CHECK(emb->type == DType::F16);
  CHECK(emb->dims == std::vector<int64_t>{8, 32000});
  CHECK(f->find_tensor("blk.0.attn_norm.weight")->type == DType::F32);
  CHECK(rewrite(*f) == infer_test::read_file(path));
}

TEST_CASE("gguf: vocabulary-only files", "[gguf]") {
  for (const char* name : {"ggml-vocab-llama-spm", "ggml-vocab-gpt-2", "ggml-vocab-falcon",
                           "ggml-vocab-deepseek-llm"}) {
    REQUIRE_SHARED(path, std::string("vocab/") + name + ".gguf");
    INFO(path);
    const auto f = GgufFile::open(path);
    CHECK(f->tensors().empty());
    CHECK(f->get_string("tokenizer.ggml.model").has_value());
    CHECK(!f->get_string_array("tokenizer.ggml.tokens").empty());
    CHECK(rewrite(*f) == infer_test::read_file(path));
  }
}

TEST_CASE("gguf: values as text", "[gguf]") {
  CHECK(gguf_value_text(GgufValue::make_string("llama")) == "llama");
  CHECK(gguf_value_text(GgufValue::make_bool(true)) == "true");
  CHECK(gguf_value_text(GgufValue::make_bool(false)) == "false");
  CHECK(gguf_value_text(GgufValue::make_u32(4000000000u)) == "4000000000");
  CHECK(gguf_value_text(GgufValue::make_i32(-7)) == "-7");
  CHECK(gguf_value_text(GgufValue::make_u64(UINT64_MAX)) == "18446744073709551615");
  CHECK(gguf_value_text(GgufValue::make_f32(0.1f)) == "0.100000001");  // 9 significant digits: exact for f32
  CHECK(gguf_value_text(GgufValue::make_i32_array({1, -2, 3})) == "[1, -2, 3]");
  CHECK(gguf_value_text(GgufValue::make_string_array({"a", "b c"})) == "[a, b c]");
  CHECK(gguf_value_text(GgufValue::make_array(GgufType::Array, {GgufValue::make_i32_array({}),
                                                                  GgufValue::make_f32_array({0.5f})})) ==
        "[[], [0.5]]");
}
