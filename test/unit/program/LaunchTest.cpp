//===- LaunchTest.cpp - Launcher variables and the rank-0 id exchange -----===//
//
// readDistEnv for torchrun, dsrun, Slurm and Open MPI (set with setenv, the
// process's own values restored afterwards), precedence and the errors of
// malformed values; Slurm's compressed host and task lists; exchangeId
// among threads on loopback: the blob arrives intact, a world-size mismatch
// or a duplicate rank fails every rank with one message, and timeouts name
// what was waited for.
//
//===----------------------------------------------------------------------===//

#include "program/launch.h"

#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace dsc;
using namespace dsc::launch;

namespace {

bool contains(const std::string &s, const std::string &part) {
  return s.find(part) != std::string::npos;
}

//===----------------------------------------------------------------------===//
// Environment
//===----------------------------------------------------------------------===//

const char *const kVars[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "DSRUN",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NODEID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_NODELIST",
    "SLURM_JOB_NODELIST",
    "SLURM_NODELIST",
    "SLURM_JOB_ID",
    "SLURM_JOBID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
};

/// Clears every launcher variable for the test and restores the process's
/// own values afterwards (the tests may themselves run under a launcher).
class LaunchEnv : public ::testing::Test {
protected:
  void SetUp() override {
    for (const char *name : kVars) {
      if (const char *v = std::getenv(name))
        saved_[name] = v;
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const char *name : kVars) {
      auto it = saved_.find(name);
      if (it != saved_.end())
        ::setenv(name, it->second.c_str(), 1);
      else
        ::unsetenv(name);
    }
  }
  static void
  set(std::initializer_list<std::pair<const char *, const char *>> vars) {
    for (auto &[name, value] : vars)
      ::setenv(name, value, 1);
  }
  static DistEnv readOk() {
    DistEnv e;
    Status st = readDistEnv(e);
    EXPECT_TRUE(st.ok()) << st.message();
    return e;
  }
  static std::string readError() {
    DistEnv e;
    Status st = readDistEnv(e);
    EXPECT_FALSE(st.ok());
    EXPECT_EQ(st.code(), StatusCode::InvalidArgument);
    EXPECT_FALSE(e.present);
    return st.message();
  }

private:
  std::map<std::string, std::string> saved_;
};

void setTorchrun() {
  ::setenv("RANK", "2", 1);
  ::setenv("WORLD_SIZE", "8", 1);
  ::setenv("LOCAL_RANK", "2", 1);
  ::setenv("LOCAL_WORLD_SIZE", "4", 1);
  ::setenv("MASTER_ADDR", "node1", 1);
  ::setenv("MASTER_PORT", "29501", 1);
}

TEST_F(LaunchEnv, NoVariablesMeansOneProcess) {
  // MASTER_* alone start nothing.
  set({{"MASTER_ADDR", "node1"}, {"MASTER_PORT", "1234"}});
  DistEnv e = readOk();
  EXPECT_FALSE(e.present);
  EXPECT_EQ(e.rank, 0);
  EXPECT_EQ(e.worldSize, 1);
  EXPECT_EQ(e.localRank, 0);
  EXPECT_EQ(e.localWorldSize, 1);
  EXPECT_EQ(e.source, "");
}

TEST_F(LaunchEnv, Torchrun) {
  setTorchrun();
  DistEnv e = readOk();
  EXPECT_TRUE(e.present);
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.worldSize, 8);
  EXPECT_EQ(e.localRank, 2);
  EXPECT_EQ(e.localWorldSize, 4);
  EXPECT_EQ(e.masterAddr, "node1");
  EXPECT_EQ(e.masterPort, 29501);
}

TEST_F(LaunchEnv, Dsrun) {
  setTorchrun();
  set({{"DSRUN", "1"}});
  DistEnv e = readOk();
  EXPECT_EQ(e.source, "dsrun");
  EXPECT_EQ(e.rank, 2);
  EXPECT_EQ(e.worldSize, 8);
}

TEST_F(LaunchEnv, TorchrunSingleProcessDefaults) {
  set({{"RANK", "0"}, {"WORLD_SIZE", "1"}});
  DistEnv e = readOk();
  EXPECT_TRUE(e.present);
  EXPECT_EQ(e.localRank, 0);
  EXPECT_EQ(e.localWorldSize, 1);
  EXPECT_EQ(e.masterAddr, "127.0.0.1");
  EXPECT_EQ(e.masterPort, 29500);
}

TEST_F(LaunchEnv, TorchrunErrors) {
  setTorchrun();
  set({{"RANK", "abc"}});
  std::string m = readError();
  EXPECT_TRUE(contains(m, "RANK='abc'")) << m;
  EXPECT_TRUE(contains(m, "whole number")) << m;

  set({{"RANK", "-1"}});
  EXPECT_TRUE(contains(readError(), "RANK='-1'"));
  set({{"RANK", "2x"}});
  EXPECT_TRUE(contains(readError(), "RANK='2x'"));

  set({{"RANK", "8"}});
  m = readError();
  EXPECT_TRUE(contains(m, "RANK=8 is not below WORLD_SIZE=8")) << m;

  set({{"RANK", "2"}, {"WORLD_SIZE", "0"}});
  EXPECT_TRUE(contains(readError(), "WORLD_SIZE='0'"));

  set({{"WORLD_SIZE", "8"}, {"LOCAL_RANK", "4"}});
  m = readError();
  EXPECT_TRUE(contains(m, "LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE=4")) << m;

  set({{"LOCAL_RANK", "2"}, {"LOCAL_WORLD_SIZE", "16"}});
  EXPECT_TRUE(contains(readError(), "LOCAL_WORLD_SIZE=16 exceeds"));

  set({{"LOCAL_WORLD_SIZE", "4"}, {"MASTER_PORT", "70000"}});
  m = readError();
  EXPECT_TRUE(contains(m, "MASTER_PORT='70000'")) << m;
  EXPECT_TRUE(contains(m, "65535")) << m;

  set({{"MASTER_PORT", "29501"}});
  ::unsetenv("MASTER_ADDR");
  m = readError();
  EXPECT_TRUE(contains(m, "MASTER_ADDR is not set")) << m;
  EXPECT_TRUE(contains(m, "8 processes")) << m;

  set({{"MASTER_ADDR", "node1"}});
  ::unsetenv("LOCAL_RANK");
  EXPECT_TRUE(contains(readError(), "LOCAL_RANK is not set"));

  set({{"LOCAL_RANK", "2"}});
  ::unsetenv("RANK");
  EXPECT_TRUE(contains(readError(), "RANK is not set"));

  set({{"RANK", "2"}, {"DSRUN", "yes"}});
  EXPECT_TRUE(contains(readError(), "DSRUN='yes'"));

  ::unsetenv("DSRUN");
  EXPECT_TRUE(readOk().present);
}

TEST_F(LaunchEnv, Slurm) {
  set({{"SLURM_PROCID", "5"},
       {"SLURM_NTASKS", "8"},
       {"SLURM_LOCALID", "1"},
       {"SLURM_NODEID", "1"},
       {"SLURM_TASKS_PER_NODE", "4(x2)"},
       {"SLURM_JOB_NODELIST", "gpu[01-04,07],login1"},
       {"SLURM_JOB_ID", "123456"}});
  DistEnv e = readOk();
  EXPECT_TRUE(e.present);
  EXPECT_EQ(e.source, "slurm");
  EXPECT_EQ(e.rank, 5);
  EXPECT_EQ(e.worldSize, 8);
  EXPECT_EQ(e.localRank, 1);
  EXPECT_EQ(e.localWorldSize, 4);
  EXPECT_EQ(e.masterAddr, "gpu01");
  EXPECT_EQ(e.masterPort, 29500 + 456);

  // MASTER_PORT and MASTER_ADDR win; SLURM_NTASKS_PER_NODE wins over the
  // compressed list; SLURM_NODELIST stands in for SLURM_JOB_NODELIST.
  set({{"MASTER_PORT", "31000"}, {"SLURM_NTASKS_PER_NODE", "2"}});
  e = readOk();
  EXPECT_EQ(e.masterPort, 31000);
  EXPECT_EQ(e.localWorldSize, 2);
  ::unsetenv("SLURM_JOB_NODELIST");
  set({{"SLURM_NODELIST", "node[7-9]"}});
  EXPECT_EQ(readOk().masterAddr, "node7");
  set({{"SLURM_STEP_NODELIST", "node[8-9]"}});
  EXPECT_EQ(readOk().masterAddr, "node8");
  set({{"MASTER_ADDR", "10.0.0.1"}});
  EXPECT_EQ(readOk().masterAddr, "10.0.0.1");
}

TEST_F(LaunchEnv, SlurmUnevenNodes) {
  set({{"SLURM_PROCID", "9"},
       {"SLURM_NTASKS", "10"},
       {"SLURM_LOCALID", "1"},
       {"SLURM_NODEID", "2"},
       {"SLURM_TASKS_PER_NODE", "4(x2),2"},
       {"SLURM_NODELIST", "a1,a2,b1"}});
  DistEnv e = readOk();
  EXPECT_EQ(e.localWorldSize, 2);
  EXPECT_EQ(e.masterAddr, "a1");
  EXPECT_EQ(e.masterPort, 29500); // no job id

  ::unsetenv("SLURM_NODEID");
  std::string m = readError();
  EXPECT_TRUE(contains(m, "SLURM_NODEID is not set")) << m;

  set({{"SLURM_NODEID", "3"}});
  m = readError();
  EXPECT_TRUE(contains(m, "SLURM_NODEID=3")) << m;
  EXPECT_TRUE(contains(m, "3 node(s)")) << m;
}

TEST_F(LaunchEnv, SlurmErrors) {
  set({{"SLURM_PROCID", "1"},
       {"SLURM_NTASKS", "4"},
       {"SLURM_LOCALID", "1"},
       {"SLURM_TASKS_PER_NODE", "4"},
       {"SLURM_JOB_NODELIST", "gpu[01-"}});
  std::string m = readError();
  EXPECT_TRUE(contains(m, "SLURM_JOB_NODELIST='gpu[01-'")) << m;
  EXPECT_TRUE(contains(m, "set MASTER_ADDR")) << m;

  set({{"SLURM_JOB_NODELIST", "gpu01"}, {"SLURM_TASKS_PER_NODE", "4(x"}});
  EXPECT_TRUE(contains(readError(), "SLURM_TASKS_PER_NODE='4(x'"));

  set({{"SLURM_TASKS_PER_NODE", "4"}, {"SLURM_LOCALID", "4"}});
  EXPECT_TRUE(contains(readError(), "SLURM_LOCALID=4 is not below"));

  set({{"SLURM_LOCALID", "1"}, {"SLURM_PROCID", "4"}});
  EXPECT_TRUE(contains(readError(), "SLURM_PROCID=4 is not below"));

  set({{"SLURM_PROCID", "1"}});
  ::unsetenv("SLURM_NTASKS");
  m = readError();
  EXPECT_TRUE(contains(m, "SLURM_NTASKS is not set")) << m;
  EXPECT_TRUE(contains(m, "srun")) << m;

  set({{"SLURM_NTASKS", "4"}, {"SLURM_JOB_ID", "12a"}});
  EXPECT_TRUE(contains(readError(), "SLURM_JOB_ID='12a'"));
}

TEST_F(LaunchEnv, OpenMpi) {
  set({{"OMPI_COMM_WORLD_RANK", "3"},
       {"OMPI_COMM_WORLD_SIZE", "4"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"}});
  std::string m = readError();
  EXPECT_TRUE(contains(m, "MASTER_ADDR is not set")) << m;
  EXPECT_TRUE(contains(m, "Open MPI")) << m;
  EXPECT_TRUE(contains(m, "mpirun -x MASTER_ADDR=")) << m;

  set({{"MASTER_ADDR", "head"}});
  m = readError();
  EXPECT_TRUE(contains(m, "MASTER_PORT is not set")) << m;

  set({{"MASTER_PORT", "29600"}});
  DistEnv e = readOk();
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.worldSize, 4);
  EXPECT_EQ(e.localRank, 1);
  EXPECT_EQ(e.localWorldSize, 2);
  EXPECT_EQ(e.masterAddr, "head");
  EXPECT_EQ(e.masterPort, 29600);

  set({{"OMPI_COMM_WORLD_LOCAL_SIZE", "x"}});
  EXPECT_TRUE(contains(readError(), "OMPI_COMM_WORLD_LOCAL_SIZE='x'"));
}

TEST_F(LaunchEnv, Precedence) {
  // torchrun inside an srun step; mpirun inside a Slurm allocation.
  set({{"SLURM_PROCID", "0"},
       {"SLURM_NTASKS", "1"},
       {"SLURM_LOCALID", "0"},
       {"SLURM_TASKS_PER_NODE", "1"},
       {"SLURM_JOB_NODELIST", "n1"}});
  EXPECT_EQ(readOk().source, "slurm");
  set({{"OMPI_COMM_WORLD_RANK", "1"},
       {"OMPI_COMM_WORLD_SIZE", "2"},
       {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
       {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
       {"MASTER_ADDR", "n1"},
       {"MASTER_PORT", "29000"}});
  DistEnv e = readOk();
  EXPECT_EQ(e.source, "openmpi");
  EXPECT_EQ(e.rank, 1);
  setTorchrun();
  e = readOk();
  EXPECT_EQ(e.source, "torchrun");
  EXPECT_EQ(e.worldSize, 8);
}

//===----------------------------------------------------------------------===//
// Slurm lists
//===----------------------------------------------------------------------===//

std::vector<std::string> hostsOf(const std::string &list) {
  std::vector<std::string> hosts;
  Status st = expandSlurmNodelist(list, hosts);
  EXPECT_TRUE(st.ok()) << list << ": " << st.message();
  return hosts;
}

using Hosts = std::vector<std::string>;

TEST(LaunchSlurmList, Expands) {
  EXPECT_EQ(hostsOf("node1"), Hosts({"node1"}));
  EXPECT_EQ(hostsOf("gpu[01-04,07],login1"),
            Hosts({"gpu01", "gpu02", "gpu03", "gpu04", "gpu07", "login1"}));
  EXPECT_EQ(hostsOf("n[8-11]"), Hosts({"n8", "n9", "n10", "n11"}));
  EXPECT_EQ(hostsOf("n[098-101]"), Hosts({"n098", "n099", "n100", "n101"}));
  EXPECT_EQ(hostsOf("a[1-3]b"), Hosts({"a1b", "a2b", "a3b"}));
  EXPECT_EQ(hostsOf("r[1-2]-n[01,03]"),
            Hosts({"r1-n01", "r1-n03", "r2-n01", "r2-n03"}));
  EXPECT_EQ(hostsOf("x[7],y[0-1],z"), Hosts({"x7", "y0", "y1", "z"}));
  EXPECT_EQ(hostsOf("node-1.cluster,node-2.cluster"),
            Hosts({"node-1.cluster", "node-2.cluster"}));
  EXPECT_EQ(hostsOf("c[1-1000]").size(), 1000u);
}

TEST(LaunchSlurmList, Malformed) {
  for (const char *bad :
       {"", "gpu[01-", "gpu]", "gpu[3-1]", "gpu[a-b]", "gpu[]", "a,,b", "a,",
        "gpu[1-2", "gpu[[1]]", "gpu[1--2]", "a b", "gpu[0-99999999]"}) {
    std::vector<std::string> hosts = {"stale"};
    Status st = expandSlurmNodelist(bad, hosts);
    EXPECT_FALSE(st.ok()) << "'" << bad << "' expanded";
    EXPECT_TRUE(hosts.empty()) << bad;
  }
  std::vector<std::string> hosts;
  Status st = expandSlurmNodelist("gpu[3-1]", hosts);
  EXPECT_TRUE(contains(st.message(), "'3-1'")) << st.message();
}

TEST(LaunchSlurmList, TasksPerNode) {
  std::vector<int> counts;
  ASSERT_TRUE(expandSlurmTasksPerNode("4(x2),3", counts).ok());
  EXPECT_EQ(counts, std::vector<int>({4, 4, 3}));
  ASSERT_TRUE(expandSlurmTasksPerNode("8", counts).ok());
  EXPECT_EQ(counts, std::vector<int>({8}));
  ASSERT_TRUE(expandSlurmTasksPerNode("2,1(x3)", counts).ok());
  EXPECT_EQ(counts, std::vector<int>({2, 1, 1, 1}));
  for (const char *bad : {"", "4(x", "4(x0)", "x", "4,", "0", "4(2)", "-1"})
    EXPECT_FALSE(expandSlurmTasksPerNode(bad, counts).ok()) << bad;
}

//===----------------------------------------------------------------------===//
// exchangeId
//===----------------------------------------------------------------------===//

/// A port no one listens on now (bind port 0, as dsrun does).
int freePort() {
  int fd = ::socket(AF_INET6, SOCK_STREAM, 0);
  sockaddr_in6 a{};
  a.sin6_family = AF_INET6;
  a.sin6_addr = in6addr_any;
  if (fd >= 0) {
    int zero = 0;
    ::setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    socklen_t len = sizeof(a);
    if (::bind(fd, reinterpret_cast<sockaddr *>(&a), sizeof(a)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr *>(&a), &len) == 0) {
      ::close(fd);
      return ntohs(a.sin6_port);
    }
    ::close(fd);
  }
  fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in b{};
  b.sin_family = AF_INET;
  socklen_t len = sizeof(b);
  int port = 0;
  if (::bind(fd, reinterpret_cast<sockaddr *>(&b), sizeof(b)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr *>(&b), &len) == 0)
    port = ntohs(b.sin_port);
  ::close(fd);
  return port;
}

DistEnv rankEnv(int rank, int worldSize, int port,
                const std::string &addr = "127.0.0.1") {
  DistEnv e;
  e.present = true;
  e.rank = rank;
  e.worldSize = worldSize;
  e.localRank = rank;
  e.localWorldSize = worldSize;
  e.masterAddr = addr;
  e.masterPort = port;
  e.source = "dsrun";
  return e;
}

std::vector<uint8_t> idBlob() {
  std::vector<uint8_t> blob(128);
  for (size_t i = 0; i < blob.size(); ++i)
    blob[i] = static_cast<uint8_t>(i * 37 + 11);
  return blob;
}

struct Result {
  Status status;
  std::vector<uint8_t> blob;
};

/// Runs exchangeId for `envs` on threads; envs[k] starts after delays[k].
std::vector<Result> exchange(const std::vector<DistEnv> &envs,
                             const std::vector<int> &delaysMs,
                             double timeoutSeconds) {
  std::vector<Result> results(envs.size());
  std::vector<std::thread> threads;
  for (size_t k = 0; k < envs.size(); ++k)
    threads.emplace_back([&, k] {
      std::this_thread::sleep_for(std::chrono::milliseconds(delaysMs[k]));
      if (envs[k].rank == 0)
        results[k].blob = idBlob();
      results[k].status = exchangeId(envs[k], results[k].blob, timeoutSeconds);
    });
  for (auto &t : threads)
    t.join();
  return results;
}

TEST(LaunchExchange, FourRanksGetTheBlob) {
  int port = freePort();
  ASSERT_GT(port, 0);
  std::vector<DistEnv> envs;
  for (int r = 0; r < 4; ++r)
    envs.push_back(rankEnv(r, 4, port));
  // Rank 0 starts last: the others retry until it listens.
  auto results = exchange(envs, {300, 0, 0, 50}, 30);
  for (int r = 0; r < 4; ++r) {
    EXPECT_TRUE(results[r].status.ok())
        << "rank " << r << ": " << results[r].status.message();
    EXPECT_EQ(results[r].blob, idBlob()) << "rank " << r;
  }
}

TEST(LaunchExchange, HostNameAndEmptyBlob) {
  int port = freePort();
  ASSERT_GT(port, 0);
  std::vector<std::vector<uint8_t>> blobs(3, std::vector<uint8_t>{1, 2, 3});
  blobs[0].clear();
  std::vector<Status> st(3);
  std::vector<std::thread> threads;
  for (int r = 0; r < 3; ++r)
    threads.emplace_back([&, r] {
      st[r] = exchangeId(rankEnv(r, 3, port, "localhost"), blobs[r], 30);
    });
  for (auto &t : threads)
    t.join();
  for (int r = 0; r < 3; ++r) {
    EXPECT_TRUE(st[r].ok()) << st[r].message();
    EXPECT_TRUE(blobs[r].empty()) << "rank " << r;
  }
}

TEST(LaunchExchange, OneRankDoesNothing) {
  std::vector<uint8_t> blob = {7};
  EXPECT_TRUE(exchangeId(rankEnv(0, 1, 1), blob, 1).ok());
  EXPECT_TRUE(exchangeId(DistEnv(), blob, 1).ok());
  EXPECT_EQ(blob, std::vector<uint8_t>({7}));
  Status st = exchangeId(rankEnv(2, 2, 1234), blob, 1);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "outside world size 2")) << st.message();
  st = exchangeId(rankEnv(1, 2, 0), blob, 1);
  EXPECT_TRUE(contains(st.message(), "MASTER_PORT")) << st.message();
}

TEST(LaunchExchange, WorldSizeMismatchFailsEveryRank) {
  int port = freePort();
  ASSERT_GT(port, 0);
  std::vector<DistEnv> envs = {rankEnv(0, 4, port), rankEnv(1, 4, port),
                               rankEnv(2, 4, port), rankEnv(3, 8, port)};
  // Rank 3 comes last, so ranks 1 and 2 are waiting when it is caught.
  auto results = exchange(envs, {0, 0, 0, 500}, 20);
  const std::string message = "rank 3 says world size 8, rank 0 has 4";
  for (int r = 0; r < 4; ++r) {
    EXPECT_FALSE(results[r].status.ok()) << "rank " << r;
    EXPECT_EQ(results[r].status.code(), StatusCode::InvalidArgument);
    EXPECT_TRUE(contains(results[r].status.message(), message))
        << "rank " << r << ": " << results[r].status.message();
  }
  EXPECT_TRUE(contains(results[3].status.message(), "rank 3: rank 0 at"))
      << results[3].status.message();
}

TEST(LaunchExchange, DuplicateRank) {
  int port = freePort();
  ASSERT_GT(port, 0);
  std::vector<DistEnv> envs = {rankEnv(0, 3, port), rankEnv(1, 3, port),
                               rankEnv(1, 3, port)};
  auto results = exchange(envs, {0, 50, 300}, 20);
  for (int k = 0; k < 3; ++k) {
    EXPECT_FALSE(results[k].status.ok()) << k;
    EXPECT_TRUE(contains(results[k].status.message(), "rank 1 joined twice"))
        << k << ": " << results[k].status.message();
  }
}

TEST(LaunchExchange, ConnectTimeoutNamesRankZero) {
  int port = freePort();
  ASSERT_GT(port, 0);
  std::vector<uint8_t> blob;
  auto start = std::chrono::steady_clock::now();
  Status st = exchangeId(rankEnv(2, 4, port), blob, 0.5);
  double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_FALSE(st.ok());
  EXPECT_EQ(st.code(), StatusCode::IoError);
  EXPECT_TRUE(contains(
      st.message(),
      "rank 2: no answer from rank 0 at 127.0.0.1:" + std::to_string(port) +
          " after 0.5 s; is rank 0 running? check "
          "MASTER_ADDR/MASTER_PORT"))
      << st.message();
  EXPECT_GE(took, 0.45);
  EXPECT_LT(took, 3.0);

  st = exchangeId(rankEnv(1, 2, port, "no-such-host.invalid"), blob, 0.3);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "no-such-host.invalid")) << st.message();
  EXPECT_TRUE(contains(st.message(), "cannot resolve")) << st.message();
}

TEST(LaunchExchange, RankZeroTimeoutNamesMissingRanks) {
  int port = freePort();
  ASSERT_GT(port, 0);
  std::vector<DistEnv> envs = {rankEnv(0, 4, port), rankEnv(2, 4, port)};
  auto start = std::chrono::steady_clock::now();
  auto results = exchange(envs, {0, 0}, 1.0);
  double took =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  EXPECT_LT(took, 5.0);
  ASSERT_FALSE(results[0].status.ok());
  const std::string &m0 = results[0].status.message();
  EXPECT_TRUE(contains(m0, "only 2 of 4 ranks joined at port")) << m0;
  EXPECT_TRUE(contains(m0, "missing rank(s) 1, 3")) << m0;
  // Rank 2 was waiting and hears why.
  ASSERT_FALSE(results[1].status.ok());
  EXPECT_TRUE(contains(results[1].status.message(), "missing rank(s) 1, 3"))
      << results[1].status.message();
}

TEST(LaunchExchange, PortInUse) {
  int holder = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(holder, reinterpret_cast<sockaddr *>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(holder, 1), 0);
  ASSERT_EQ(::getsockname(holder, reinterpret_cast<sockaddr *>(&a), &len), 0);
  int port = ntohs(a.sin_port);
  std::vector<uint8_t> blob = idBlob();
  Status st = exchangeId(rankEnv(0, 2, port), blob, 1);
  ::close(holder);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "cannot listen on port " +
                                         std::to_string(port) +
                                         " (MASTER_PORT): it is in use"))
      << st.message();
}

TEST(LaunchExchange, NotOurServer) {
  // Something else answers on the port.
  int server = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(a);
  ASSERT_EQ(::bind(server, reinterpret_cast<sockaddr *>(&a), sizeof(a)), 0);
  ASSERT_EQ(::listen(server, 1), 0);
  ASSERT_EQ(::getsockname(server, reinterpret_cast<sockaddr *>(&a), &len), 0);
  std::thread answer([server] {
    int c = ::accept(server, nullptr, nullptr);
    const char reply[] = "HTTP/1.0 400 Bad Request\r\n\r\n";
    ssize_t n = ::send(c, reply, sizeof(reply) - 1, 0);
    (void)n;
    char buf[64];
    while (::recv(c, buf, sizeof(buf), 0) > 0) {
    }
    ::close(c);
  });
  std::vector<uint8_t> blob;
  Status st = exchangeId(rankEnv(1, 2, ntohs(a.sin_port)), blob, 5);
  answer.join();
  ::close(server);
  EXPECT_FALSE(st.ok());
  EXPECT_TRUE(contains(st.message(), "is not dsc's rank 0")) << st.message();
}

} // namespace
