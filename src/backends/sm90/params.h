// The device parameters of the sm90 decode kernel: RunArgs and Problem lowered once per call into
// a compact struct passed by value (__grid_constant__, which TMA needs for its tensor maps).
#pragma once

#include <cuda.h>

#include <cstdint>

#include "plan/decode_params.h"

namespace mlakit::sm90 {

struct DecodeParams : plan::DecodeParamsBase {
  CUtensorMap q_map;   // q [b * s_q * h_q rows, 576], boxes of 64 rows x 64 columns, swizzle 128B
  CUtensorMap kv_map;  // kv [num_pages * page_size rows, 576], boxes of min(page, 64) rows x 64
};

}  // namespace mlakit::sm90
