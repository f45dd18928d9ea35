//===- gradcheck.h - --gradcheck ----------------------------------*- C++
//-*-===//

#ifndef DSC_RUNTIME_PROGRAM_GRADCHECK_H
#define DSC_RUNTIME_PROGRAM_GRADCHECK_H

#include "program/ranks.h"

namespace dsc::program {

/// Compares the gradients of step 1 with central finite differences of the
/// loss at o.gradcheck elements of every parameter; prints a line per
/// parameter and `passed` is whether all were within the bound.
Status gradcheck(Job &job, Ranks &ranks, bool &passed);

} // namespace dsc::program

#endif // DSC_RUNTIME_PROGRAM_GRADCHECK_H
