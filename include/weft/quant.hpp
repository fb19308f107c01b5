// Umbrella for weft::quant's CPU side: formats, quantizers, GPTQ/AWQ converters, CPU kernels and
// their references. CUDA kernels (weft/quant/cuda/*.cuh) and Thrust primitives (*_thrust.hpp) are
// included separately, since they need nvcc or the CCCL headers.
#pragma once

#include <weft/quant/awq.hpp>
#include <weft/quant/concepts.hpp>
#include <weft/quant/cpu_features.hpp>
#include <weft/quant/format.hpp>
#include <weft/quant/gemm_sparse24.hpp>
#include <weft/quant/gemm_w4.hpp>
#include <weft/quant/gemm_w4a8.hpp>
#include <weft/quant/gemm_w8a8.hpp>
#include <weft/quant/gemv_fragments.hpp>
#include <weft/quant/gpu_sparse24_matrix.hpp>
#include <weft/quant/gpu_w4_matrix.hpp>
#include <weft/quant/gptq.hpp>
#include <weft/quant/quantized_activations.hpp>
#include <weft/quant/any_quantizer.hpp>
#include <weft/quant/quantizers.hpp>
#include <weft/quant/reference.hpp>
#include <weft/quant/sparse24_matrix.hpp>
#include <weft/quant/tile_math.hpp>
