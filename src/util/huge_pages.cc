// Huge-page buffers (util layer). See huge_pages.h.
#include "util/huge_pages.h"

#include <new>

#include <sys/mman.h>

namespace tlr {

void PageBufferFree::operator()(uint8_t* p) const {
  if (align > 0) {
    ::operator delete[](p, std::align_val_t(align));
  } else {
    delete[] p;
  }
}

PageBuffer AllocateHugePages(size_t n) {
  PageBuffer buf(new (std::align_val_t(kHugePageBytes)) uint8_t[n], PageBufferFree{kHugePageBytes});
#ifdef MADV_HUGEPAGE
  // Before the first write: faulting in hundreds of MB in 4 KiB pages also costs more than
  // filling them (seconds for a 1B model's repacking in a VM). Nothing to report if refused.
  (void)madvise(buf.get(), n, MADV_HUGEPAGE);
#endif
  return buf;
}

PageBuffer AllocateSmallPages(size_t n) { return PageBuffer(new uint8_t[n], PageBufferFree{0}); }

}  // namespace tlr
