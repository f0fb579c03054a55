// VecArray (ops layer, SIMD): a small array of Highway vectors indexed at run time, for the
// kernels' per-token accumulators. Where vectors have a size (x86, NEON) it is a plain array
// the compiler keeps in registers; SVE vectors are sizeless (no arrays, no members), so there
// it is memory of MaxLanes lanes per vector, loaded and stored around each use. Compiled once
// per target like the kernels that include it (per-target include guard).
#if defined(TLR_OPS_VEC_ARRAY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef TLR_OPS_VEC_ARRAY_INL_H_
#undef TLR_OPS_VEC_ARRAY_INL_H_
#else
#define TLR_OPS_VEC_ARRAY_INL_H_
#endif

#include <cstddef>
#include <type_traits>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace tlr {
namespace HWY_NAMESPACE {

// N vectors of tag D: Get(i) / Set(i, v).
template <class DQ, size_t N>
class VecArray {
 public:
  using D = std::remove_cv_t<DQ>;
  using V = hwy::HWY_NAMESPACE::Vec<D>;
  // Defined here, not implicitly: an implicit constructor would lack the target's attributes
  // and fail to inline the vectors' constructors (GCC: "target specific option mismatch").
  HWY_INLINE VecArray() {}
  VecArray(const VecArray&) = delete;
  VecArray& operator=(const VecArray&) = delete;
#if HWY_HAVE_SCALABLE
  HWY_INLINE V Get(size_t i) const { return hwy::HWY_NAMESPACE::LoadU(D(), mem_ + i * kStride); }
  HWY_INLINE void Set(size_t i, V v) { hwy::HWY_NAMESPACE::StoreU(v, D(), mem_ + i * kStride); }

 private:
  static constexpr size_t kStride = hwy::HWY_NAMESPACE::MaxLanes(D());
  hwy::HWY_NAMESPACE::TFromD<D> mem_[N * kStride];
#else
  HWY_INLINE V Get(size_t i) const { return v_[i]; }
  HWY_INLINE void Set(size_t i, V v) { v_[i] = v; }

 private:
  V v_[N];
#endif
};

}  // namespace HWY_NAMESPACE
}  // namespace tlr
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard
