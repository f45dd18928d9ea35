//===- comm.h - Communicators for ranks on GPUs -----------------*- C++ -*-===//
//
// Internal to runtime/cuda (device.cu hands them out through dsc::Device):
//
//  - StagedComm: an in-process rank on a GPU. Each collective waits for the
//    rank's compute stream, copies its input to host memory, runs the
//    in-process collective (deterministic, checked against the manifest)
//    and copies the output back: synchronous, for testing the sharding
//    logic with several ranks on one GPU.
//  - NcclComm: one process per GPU. A collective waits (by event) for the
//    compute stream's work so far, runs on the rank's communication stream
//    and records a completion event; wait() makes the compute stream wait
//    for it, so all-gathers and reduce-scatters run under compute. Each
//    call is checked against the compiled manifest; a collective that does
//    not complete within the timeout is named (awaitIdle).
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_CUDA_COMM_H
#define DSC_RUNTIME_CUDA_COMM_H

#include "dsc/device.h"

#include <memory>

namespace dsc::cuda {

std::unique_ptr<Communicator> makeStagedComm(Communicator *host);

class NcclComm;
/// Creates the NCCL communicator(s) of `init` for the bound rank.
Status makeNcclComm(const DistributedInit &init, const CollectiveSpec *manifest,
                    int numCollectives, NcclComm *&out);
Communicator *asCommunicator(NcclComm *comm);
/// Waits until the compute and communication streams of the bound rank are
/// idle; after `timeoutSeconds` (> 0) names the oldest collective that has
/// not completed and aborts the communicator instead of hanging.
Status awaitIdle(NcclComm *comm, double timeoutSeconds);
/// Ends `comm` (made by makeNcclComm).
void destroy(NcclComm *comm);

} // namespace dsc::cuda

#endif // DSC_RUNTIME_CUDA_COMM_H
