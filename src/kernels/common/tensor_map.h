// The driver's cuTensorMapEncodeTiled, found once through the runtime (no -lcuda): the TMA maps of
// the sm90 backend and of the ops' sm_90 kernels. CUDA builds only.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>

#include "core/check.h"

namespace mlakit {

// The encoder, or kInternal naming the runtime's error where the driver has none.
Status tensor_map_encoder(PFN_cuTensorMapEncodeTiled_v12000* fn);

}  // namespace mlakit
