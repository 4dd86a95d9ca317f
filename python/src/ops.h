// The bindings of mlakit::ops (include/mlakit/ops.h): append_kv, append_indexer, indexer_logits
// and topk_indices on arrays of any framework, for mlakit/ops.py.
#pragma once

#include <nanobind/nanobind.h>

namespace mlakit::python {

void register_ops(nanobind::module_& m);

}  // namespace mlakit::python
