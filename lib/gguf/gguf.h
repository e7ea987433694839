// GGUF: the model file format (versions 2 and 3).
//
// Layout: magic "GGUF", u32 version, u64 tensor count, u64 metadata count,
// metadata key/values, tensor infos (name, n_dims, dims, type, offset), then
// padding to `general.alignment` (default 32) and the tensor data section.
// All integers are little-endian. Every count, length and offset read from a
// file is checked against the file size before use: a hostile file gives
// Error(Format), never a crash or a huge allocation.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/mmap.h"

namespace infer {

enum class GgufType : uint32_t {
  U8 = 0,
  I8 = 1,
  U16 = 2,
  I16 = 3,
  U32 = 4,
  I32 = 5,
  F32 = 6,
  Bool = 7,
  String = 8,
  Array = 9,
  U64 = 10,
  I64 = 11,
  F64 = 12,
};

const char* gguf_type_name(GgufType t);

struct GgufArray;

// One metadata value. Scalars use the field matching their kind. An array
// keeps its element type in `elem` and its elements in a compact form, read
// through size() / at() and the typed *_at() accessors: numbers and bools as
// their raw little-endian bytes, strings back to back, nested arrays as
// values. Parsed metadata thus takes about as much memory as the file bytes
// it came from (a 100 MB array of u8 is 100 MB, not 100 bytes per element).
// Copies of an array share its (immutable) elements.
struct GgufValue {
  GgufType type = GgufType::U32;
  uint64_t u = 0;       // U8, U16, U32, U64, Bool
  int64_t i = 0;        // I8, I16, I32, I64
  double f = 0.0;       // F32, F64
  std::string s;        // String
  GgufType elem = GgufType::U32;  // Array: element type

  // Convenience constructors.
  static GgufValue make_u32(uint32_t v);
  static GgufValue make_i32(int32_t v);
  static GgufValue make_u64(uint64_t v);
  static GgufValue make_f32(float v);
  static GgufValue make_bool(bool v);
  static GgufValue make_string(std::string v);
  // An array of values of type `elem` (arrays of arrays allowed). Values of
  // another type or out of their type's range are kept as given and make the
  // writer fail with Error(InvalidArgument).
  static GgufValue make_array(GgufType elem, std::vector<GgufValue> items);
  static GgufValue make_string_array(const std::vector<std::string>& items);
  static GgufValue make_f32_array(const std::vector<float>& items);
  static GgufValue make_i32_array(const std::vector<int32_t>& items);
  // An array of a number or bool type from its little-endian bytes (whole
  // elements; bools 0 or 1), Error(InvalidArgument) otherwise.
  static GgufValue make_raw_array(GgufType elem, std::vector<uint8_t> bytes);

  bool is_integer() const;  // any of the 8 integer types (not Bool)
  bool is_float() const;    // F32 or F64
  // Numeric value as int64 / double (integers, floats, bool); Error(Format) otherwise.
  int64_t as_int() const;
  double as_float() const;
  bool operator==(const GgufValue& o) const;

  // ---- arrays (all of these see an empty array in a non-array value) ----
  size_t size() const;
  bool empty() const { return size() == 0; }
  // Element k (k < size()) as a value of type `elem`.
  GgufValue at(size_t k) const;
  // Element k of an array of strings.
  std::string_view string_at(size_t k) const;
  // Element k of an array of numbers or bools, as as_int() / as_float() would
  // give it (Error(Format) when it does not fit).
  int64_t int_at(size_t k) const;
  double float_at(size_t k) const;
  // The elements of an array of numbers or bools as stored: size() times
  // gguf_type_size(elem) little-endian bytes; nullptr for other arrays.
  const uint8_t* raw() const;
  // Approximate heap bytes the value holds (its array's storage).
  size_t memory_bytes() const;

 private:
  friend struct GgufArrayAccess;  // the reader and writer (gguf.cpp)
  std::shared_ptr<const GgufArray> arr_;
};

// Bytes of one element of a number or bool type, 0 for strings and arrays.
size_t gguf_type_size(GgufType t);

// A value as text: strings as they are, bools "true"/"false", integers in
// decimal, floats with 9 significant digits, arrays "[a, b, ...]".
std::string gguf_value_text(const GgufValue& v);

// Tensor dims as text: "[a, b, ...]" (error messages).
std::string gguf_dims_text(const std::vector<int64_t>& dims);

struct GgufTensorInfo {
  std::string name;
  std::vector<int64_t> dims;  // dims[0] is the fastest-varying (row length)
  DType type = DType::F32;
  uint64_t offset = 0;        // relative to the start of the data section
  uint64_t nbytes = 0;        // computed from dims and type
  // Which file holds the bytes: 0 for a GGUF file; an assembled view
  // (GgufFile::assemble) indexes its files, and offset is then absolute.
  uint32_t source = 0;
  int64_t n_elements() const;
  int64_t n_rows() const { return dims.empty() ? 1 : n_elements() / dims[0]; }
};

class GgufFile {
 public:
  // Opens and parses a file. Error(Io) if it cannot be read, Error(Format) if
  // it is not a valid GGUF (message says what and where), Error(Unsupported)
  // for a version or tensor type this library does not handle.
  static std::unique_ptr<GgufFile> open(const std::string& path, bool use_mmap = true);
  // Parses bytes already in memory (fuzzing, tests). The buffer is borrowed.
  static std::unique_ptr<GgufFile> from_memory(const void* data, size_t size);
  static std::unique_ptr<GgufFile> from_file(std::unique_ptr<MappedFile> file);
  // A GGUF-shaped view built in code (the Hugging Face loader, lib/hf):
  // metadata as given and tensors whose bytes lie in any of `files`
  // (GgufTensorInfo::source indexes them; offset is absolute in that file).
  // Checked here as the reader checks a file: names unique and non-empty,
  // known types, dims positive with whole blocks per row, nbytes computed
  // from dims and type (any given value is replaced), every range inside its
  // file. Error(Format) naming the tensor otherwise. At least one file.
  static std::unique_ptr<GgufFile> assemble(std::vector<std::unique_ptr<MappedFile>> files,
                                            std::vector<std::pair<std::string, GgufValue>> metadata,
                                            std::vector<GgufTensorInfo> tensors);

  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  size_t data_offset() const { return data_offset_; }  // absolute start of tensor data

  // Metadata in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return kv_; }
  const GgufValue* find(std::string_view key) const;

  // Typed lookups: nullopt when the key is absent; Error(Format) naming the
  // key when present with an incompatible type.
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;     // any integer type
  std::optional<double> get_float(std::string_view key) const;    // float or integer
  std::optional<bool> get_bool(std::string_view key) const;
  // Arrays: nullptr / empty when absent; Error(Format) on an element type mismatch.
  const GgufValue* get_array(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<float> get_f32_array(std::string_view key) const;     // numeric elements
  std::vector<int64_t> get_int_array(std::string_view key) const;   // integer elements

  const std::vector<GgufTensorInfo>& tensors() const { return tensors_; }
  const GgufTensorInfo* find_tensor(std::string_view name) const;
  // Pointer to a tensor's bytes (bounds were checked at parse time).
  const uint8_t* tensor_data(const GgufTensorInfo& t) const;

  // The first file (for an assembled view, files[0]).
  const MappedFile& file() const { return *file_; }
  size_t n_files() const { return 1 + more_.size(); }
  // check_intact() of every file this view reads.
  void check_intact() const;
  // MappedFile::release of the file holding [p, p + n): pages read once
  // (weight checks, a tensor-parallel rank's copied share) given back.
  void release(const void* p, size_t n) const;
  // Every tensor's pages.
  void release_all() const;
  // MappedFile::advise_random of the file holding [p, p + n).
  void advise_random(const void* p, size_t n) const;

 private:
  GgufFile() = default;
  void parse();

  std::unique_ptr<MappedFile> file_;
  std::vector<std::unique_ptr<MappedFile>> more_;  // assembled views: files[1..]
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  size_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
  std::vector<GgufTensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF file: metadata in insertion order, tensors laid out in order,
// each aligned to `general.alignment` (32 unless set).
class GgufWriter {
 public:
  explicit GgufWriter(uint32_t version = 3) : version_(version) {}
  // Replaces an existing key in place, else appends.
  void set(const std::string& key, GgufValue value);
  // Adds a tensor; `data` must hold exactly the bytes the dims and type imply
  // (Error(InvalidArgument) otherwise). Data is copied.
  void add_tensor(const std::string& name, const std::vector<int64_t>& dims, DType type,
                  const void* data, size_t nbytes);
  std::vector<uint8_t> to_bytes() const;
  // Writes to a temporary file beside `path` and renames it into place.
  void write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    std::vector<int64_t> dims;
    DType type;
    std::vector<uint8_t> data;
  };
  // Serialized header, metadata and tensor infos, padded to the data section;
  // stores the alignment in use.
  std::vector<uint8_t> header_bytes(uint64_t* alignment) const;
  uint32_t version_;
  std::vector<std::pair<std::string, GgufValue>> kv_;
  std::vector<Tensor> tensors_;
};

}  // namespace infer
