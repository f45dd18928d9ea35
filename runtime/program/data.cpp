//===- data.cpp - Batches for the step: --batch and --data ----------------===//

#include "program/data.h"
#include "io/safetensors.h"
#include "program/convert.h"

#include <cerrno>
#include <cstring>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace dsc::program {

namespace {

std::string joinNames(const std::vector<std::string> &names) {
  std::string s;
  for (size_t i = 0; i < names.size(); ++i) {
    if (i == 8) {
      s += ", ... (" + std::to_string(names.size()) + " in all)";
      break;
    }
    s += (i ? ", " : "") + names[i];
  }
  return s.empty() ? "none" : s;
}

std::string slotNames(const std::vector<InputSlot> &slots) {
  std::vector<std::string> names;
  for (const auto &s : slots)
    names.push_back(s.name);
  return joinNames(names);
}

std::string batchText(const BatchShape &b) {
  if (b.ranks > 1)
    return std::to_string(b.global()) + " (" + std::to_string(b.ranks) +
           " ranks x micro-batch " + std::to_string(b.microBatch) + " x " +
           std::to_string(b.accumSteps) + " accumulation steps)";
  return std::to_string(b.global()) + " (micro-batch " +
         std::to_string(b.microBatch) + " x " + std::to_string(b.accumSteps) +
         " accumulation steps)";
}

} // namespace

//===----------------------------------------------------------------------===//
// --batch
//===----------------------------------------------------------------------===//

Status loadBatchFile(const std::string &path,
                     const std::vector<InputSlot> &slots,
                     const BatchShape &batch,
                     std::vector<std::string> *unused) {
  io::SafetensorsFile file;
  if (Status s = file.read(path); !s.ok())
    return Status::error(s.code(), "--batch: " + s.message());
  for (const InputSlot &slot : slots) {
    std::string what = "--batch " + path + ": tensor '" + slot.name + "'";
    if (!file.contains(slot.name))
      return Status::error(StatusCode::InvalidArgument,
                           "--batch " + path + " has no tensor '" + slot.name +
                               "'; the program's inputs are " +
                               slotNames(slots) + ", the file has " +
                               joinNames(file.names()));
    Tensor src;
    if (Status s = file.get(slot.name, src); !s.ok())
      return s;
    const Tensor &dst = slot.tensor;
    bool onlyDim0 =
        src.rank == dst.rank && dst.rank > 0 && src.shape[0] != dst.shape[0];
    for (int i = 1; onlyDim0 && i < dst.rank; ++i)
      onlyDim0 = src.shape[i] == dst.shape[i];
    if (onlyDim0)
      return Status::error(StatusCode::InvalidArgument,
                           what + " has shape " + describe(src) +
                               " but the program expects " + describe(dst) +
                               ": dim 0 is the global batch, " +
                               batchText(batch));
    if (Status s = copyInto(src, dst, what); !s.ok())
      return s;
  }
  if (unused)
    for (const std::string &name : file.names()) {
      bool taken = false;
      for (const InputSlot &slot : slots)
        taken = taken || slot.name == name;
      if (!taken)
        unused->push_back(name);
    }
  return Status();
}

//===----------------------------------------------------------------------===//
// --data
//===----------------------------------------------------------------------===//

bool parseTokenType(const std::string &text, TokenType &out) {
  if (text == "uint16" || text == "u16") {
    out = TokenType::U16;
    return true;
  }
  if (text == "int32" || text == "i32") {
    out = TokenType::I32;
    return true;
  }
  return false;
}

const char *tokenTypeName(TokenType type) {
  return type == TokenType::U16 ? "uint16" : "int32";
}

TokenData::~TokenData() {
  if (map_)
    ::munmap(const_cast<uint8_t *>(map_), mapSize_);
}

int64_t TokenData::token(size_t i) const {
  if (type_ == TokenType::U16) {
    uint16_t v;
    std::memcpy(&v, map_ + 2 * i, 2);
    return v;
  }
  int32_t v;
  std::memcpy(&v, map_ + 4 * i, 4);
  return v;
}

Status TokenData::open(const std::string &path, TokenType type,
                       const std::vector<InputSlot> &slots,
                       const BatchShape &batch) {
  auto fail = [&](const std::string &why) {
    return Status::error(StatusCode::InvalidArgument,
                         "--data " + path + ": " + why);
  };
  // 1. The inputs must be token ids: one or two integer [N, T].
  if (slots.empty())
    return fail("the program takes no inputs");
  if (slots.size() > 2)
    return fail("a token file feeds one or two inputs (tokens, targets), but "
                "the program takes " +
                std::to_string(slots.size()) + " (" + slotNames(slots) +
                "); give its batch with --batch FILE.safetensors");
  for (const InputSlot &slot : slots) {
    const Tensor &t = slot.tensor;
    if (isFloat(t.dtype) || t.dtype == DType::Bool)
      return fail("a token file feeds token ids, but input '" + slot.name +
                  "' is " + describe(t) +
                  "; give its batch with --batch FILE.safetensors");
    if (t.rank != 2)
      return fail("input '" + slot.name + "' is " + describe(t) +
                  "; token windows need [batch, sequence]");
    if (t.shape[0] != batch.global())
      return fail("input '" + slot.name + "' is " + describe(t) +
                  " but the global batch is " + batchText(batch));
    if (t.shape[1] != slots[0].tensor.shape[1])
      return fail("inputs '" + slots[0].name + "' " +
                  describe(slots[0].tensor) + " and '" + slot.name + "' " +
                  describe(t) + " have different sequence lengths");
  }

  // 2. Map the file.
  path_ = path;
  type_ = type;
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return fail(std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return fail("not a regular file");
  }
  size_t es = type == TokenType::U16 ? 2 : 4;
  size_t size = static_cast<size_t>(st.st_size);
  if (size % es) {
    ::close(fd);
    return fail(std::to_string(size) + " bytes is not a whole number of " +
                tokenTypeName(type) + " tokens (wrong --data-dtype?)");
  }
  numTokens_ = size / es;
  int64_t T = slots[0].tensor.shape[1];
  if (numTokens_ < static_cast<size_t>(T) + 1) {
    ::close(fd);
    return fail("holds " + std::to_string(numTokens_) + " tokens; windows of " +
                std::to_string(T) +
                " tokens and their next-token targets need at least " +
                std::to_string(T + 1));
  }
  void *m = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED)
    return fail(std::string("cannot map: ") + std::strerror(errno));
  map_ = static_cast<const uint8_t *>(m);
  mapSize_ = size;
  return Status();
}

Status TokenData::sample(Rng &rng, const std::vector<InputSlot> &slots) const {
  int64_t N = slots[0].tensor.shape[0], T = slots[0].tensor.shape[1];
  uint64_t starts = numTokens_ - static_cast<uint64_t>(T); // i in [0, L-T-1]
  for (int64_t r = 0; r < N; ++r) {
    size_t i = static_cast<size_t>(rng.below(starts));
    for (size_t k = 0; k < slots.size(); ++k) {
      const Tensor &t = slots[k].tensor;
      for (int64_t j = 0; j < T; ++j) {
        size_t at = i + k + static_cast<size_t>(j);
        int64_t v = token(at);
        if (v < 0)
          return Status::error(StatusCode::OutOfRange,
                               "--data " + path_ + ": token " +
                                   std::to_string(at) + " is " +
                                   std::to_string(v) + ", not a token id");
        if (!convertElements(&v, DType::I64,
                             static_cast<char *>(t.data) +
                                 (r * T + j) * dtypeSize(t.dtype),
                             t.dtype, 1))
          return Status::error(
              StatusCode::OutOfRange,
              "--data " + path_ + ": token " + std::to_string(at) + " (" +
                  std::to_string(v) + ") does not fit input '" + slots[k].name +
                  "' " + describe(t));
      }
    }
  }
  return Status();
}

} // namespace dsc::program
