//===- launch.h - Where this process sits in a multi-process run -*- C++
//-*-===//
//
// A compiled program runs one process per GPU, started by torchrun, Slurm
// (srun), Open MPI (mpirun) or dsrun (tools/dsrun). This file reads what the
// launcher told the process (its rank, the world size, where rank 0 listens)
// and hands a small blob from rank 0 to every other rank over TCP: the NCCL
// unique id, before the communicator exists.
//
//   readDistEnv   the environment, in order of precedence:
//     torchrun / dsrun  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//                       MASTER_ADDR, MASTER_PORT (dsrun adds DSRUN=1)
//     Open MPI          OMPI_COMM_WORLD_{RANK,SIZE,LOCAL_RANK,LOCAL_SIZE};
//                       MASTER_ADDR and MASTER_PORT must be passed (-x)
//     Slurm             SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID,
//                       SLURM_NTASKS_PER_NODE or SLURM_TASKS_PER_NODE
//                       ("4(x2),3", indexed by SLURM_NODEID); rank 0's host
//                       is the first of SLURM_STEP_NODELIST, else
//                       SLURM_JOB_NODELIST, else SLURM_NODELIST (unless
//                       MASTER_ADDR is set); the port is MASTER_PORT or
//                       29500 + SLURM_JOB_ID % 1000
//     Open MPI comes before Slurm: mpirun inside a Slurm allocation leaves
//     the allocation's SLURM_* variables (SLURM_PROCID of the batch step) in
//     every process, while OMPI_COMM_WORLD_* are set by mpirun itself.
//
//   exchangeId    rank 0 listens on MASTER_PORT (all interfaces), waits for
//                 the other WORLD_SIZE - 1 ranks, checks each one's rank and
//                 world size, then sends every one the blob; the others
//                 connect to MASTER_ADDR:MASTER_PORT, retrying until the
//                 timeout (rank 0 may start later), and receive it.
//
// Errors name the variable or the peer and what to do about it. No global
// state; the functions read the environment and nothing else.
//
//===----------------------------------------------------------------------===//

#ifndef DSC_RUNTIME_PROGRAM_LAUNCH_H
#define DSC_RUNTIME_PROGRAM_LAUNCH_H

#include "dsc/runtime.h"

#include <cstdint>
#include <string>
#include <vector>

namespace dsc::launch {

/// This process's place in the run. With no launcher variables at all,
/// `present` is false and the process is rank 0 of 1.
struct DistEnv {
  bool present = false;
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;      // index among the processes of this node
  int localWorldSize = 1; // processes on this node
  std::string masterAddr; // host of rank 0 (name or address)
  int masterPort = 0;     // port rank 0 listens on, 1..65535
  std::string source;     // "torchrun", "dsrun", "slurm", "openmpi" or ""
};

/// Reads the launcher's variables (see the top of this file). Malformed or
/// inconsistent values are an InvalidArgument naming the variable.
Status readDistEnv(DistEnv &out);

/// Expands a Slurm host list ("gpu[01-04,07],login1", "rack[1-2]-n[1-3]")
/// into its hosts, in order, zero padding kept.
Status expandSlurmNodelist(const std::string &list,
                           std::vector<std::string> &hosts);

/// Expands SLURM_TASKS_PER_NODE ("4(x2),3") into one count per node.
Status expandSlurmTasksPerNode(const std::string &text,
                               std::vector<int> &counts);

/// Rank 0 sends `blob` to every other rank, which receive it into `blob`.
/// Rank 0 returns once every rank has it. A world-size mismatch, a rank
/// that connects twice, or a timeout fails every rank that is connected,
/// with the same message. A world of one (or `present` false) does nothing.
Status exchangeId(const DistEnv &env, std::vector<uint8_t> &blob,
                  double timeoutSeconds);

} // namespace dsc::launch

#endif // DSC_RUNTIME_PROGRAM_LAUNCH_H
