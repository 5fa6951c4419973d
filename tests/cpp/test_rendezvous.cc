// Rendezvous through a store: ranks as threads build real shm and tcp links,
// run an allreduce over them, and a missing rank is reported by number.
#include <thread>

#include "algo/collectives.h"
#include "comm/communicator.h"
#include "core/error.h"
#include "harness.h"

using namespace scalecomm;

namespace {

void allreduceOverMesh(int n, const std::string& transport, const std::string& key, MemoryStore& store) {
  std::vector<std::vector<double>> bufs(n, std::vector<double>(100003));
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        MeshOptions mo;
        mo.transport = transport;
        mo.shmRingBytes = 1 << 16;
        auto comm = Communicator::connectMesh(store, key, r, n, mo, Deadline::after(std::chrono::seconds(20)));
        for (int q = 0; q < n; ++q) {
          if (q != r) CHECK_EQ(std::string(comm->link(q).kind()), transport == "tcp" ? "tcp" : "shm");
        }
        for (size_t i = 0; i < bufs[r].size(); ++i) bufs[r][i] = static_cast<double>(i % 17) * (r + 1);
        CollectiveOptions o;
        o.segmentBytes = 8192;
        o.deadline = Deadline::after(std::chrono::seconds(20));
        allreduce(*comm, bufs[r].data(), static_cast<int64_t>(bufs[r].size()), DataType::Float64, ReduceOp::Sum, 1, o);
      } catch (const std::exception& e) {
        errors[r] = e.what();
      } catch (const sctest::Failure& f) {
        errors[r] = f.msg;
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors) CHECK_EQ(e, std::string());
  const double tri = n * (n + 1) / 2.0;
  for (int r = 0; r < n; ++r)
    for (size_t i = 0; i < bufs[r].size(); ++i) CHECK_EQ(bufs[r][i], tri * static_cast<double>(i % 17));
}

}  // namespace

TEST(shm_mesh_allreduce) {
  MemoryStore store;
  allreduceOverMesh(3, "auto", "shm-test", store);
}

TEST(tcp_mesh_allreduce) {
  MemoryStore store;
  allreduceOverMesh(4, "tcp", "tcp-test", store);
}

TEST(missing_rank_is_named) {
  MemoryStore store;
  std::string msg;
  try {
    Communicator::connectMesh(store, "missing", 0, 3, MeshOptions{}, Deadline::after(std::chrono::milliseconds(300)));
  } catch (const Error& e) {
    msg = e.what();
    CHECK(e.kind() == ErrorKind::Timeout);
  }
  CHECK(msg.find("1 of 3 ranks arrived, missing ranks: [1, 2]") != std::string::npos);
}

TEST(same_key_twice_uses_a_fresh_generation) {
  MemoryStore store;  // the second group must not read the first one's (stale) addresses
  allreduceOverMesh(2, "auto", "again", store);
  allreduceOverMesh(2, "tcp", "again", store);
}

TEST_MAIN()
