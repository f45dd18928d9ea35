//===- crc32c.h - CRC-32C (Castagnoli) and TFRecord's mask ------*- C++ -*-===//
//
// CRC-32C, the checksum of TFRecord framing (TensorBoard event files):
// reflected polynomial 0x82F63B78, initial value and final xor 0xFFFFFFFF,
// computed a byte at a time from a 256-entry table built at compile time.
// crc32c("123456789") == 0xE3069283.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_IO_CRC32C_H
#define DSC_RUNTIME_IO_CRC32C_H

#include <cstddef>
#include <cstdint>

namespace dsc::io {

/// The CRC-32C of `bytes` bytes at `data`, continuing `crc` (the CRC of
/// what came before; 0 to start).
uint32_t crc32c(const void *data, size_t bytes, uint32_t crc = 0);

/// TFRecord stores CRCs masked, so that a CRC of data that itself holds
/// CRCs does not degenerate: rotate right by 15 bits, add 0xa282ead8.
uint32_t maskCrc32c(uint32_t crc);
uint32_t unmaskCrc32c(uint32_t masked);

} // namespace dsc::io

#endif // DSC_RUNTIME_IO_CRC32C_H
