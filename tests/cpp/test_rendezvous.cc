// Rendezvous through a store: ranks as threads build real shm and tcp links,
// run an allreduce over them, and a missing rank is reported by number.
#include <functional>
#include <thread>

#include "algo/collectives.h"
#include "comm/communicator.h"
#include "comm/stream_channel.h"
#include "core/error.h"
#include "harness.h"
#include "transport/tcp.h"

using namespace scalecomm;

namespace {

// Rank r's mesh options and the link kind it must get to each peer.
using OptionsOf = std::function<MeshOptions(int rank)>;
using KindOf = std::function<std::string(int rank, int peer)>;
using MeshCheck = std::function<void(int rank, Communicator& comm)>;

void allreduceOverMesh(int n, const OptionsOf& optionsOf, const KindOf& kindOf, const std::string& key,
                       MemoryStore& store, const MeshCheck& check = nullptr) {
  std::vector<std::vector<double>> bufs(n, std::vector<double>(100003));
  std::vector<std::string> errors(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        MeshOptions mo = optionsOf(r);
        mo.shmRingBytes = 1 << 16;
        auto comm = Communicator::connectMesh(store, key, r, n, mo, Deadline::after(std::chrono::seconds(20)));
        for (int q = 0; q < n; ++q) {
          if (q != r) CHECK_EQ(std::string(comm->link(q).kind()), kindOf(r, q));
        }
        for (size_t i = 0; i < bufs[r].size(); ++i) bufs[r][i] = static_cast<double>(i % 17) * (r + 1);
        CollectiveOptions o;
        o.segmentBytes = 8192;
        o.deadline = Deadline::after(std::chrono::seconds(20));
        allreduce(comm->channel(), bufs[r].data(), static_cast<int64_t>(bufs[r].size()), DataType::Float64,
                  ReduceOp::Sum, 1, o);
        if (check) check(r, *comm);
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

void allreduceOverMesh(int n, const std::string& transport, const std::string& key, MemoryStore& store) {
  allreduceOverMesh(
      n,
      [&](int) {
        MeshOptions mo;
        mo.transport = transport;
        return mo;
      },
      [&](int, int) { return transport == "tcp" ? "tcp" : "shm"; }, key, store);
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

// Several sockets per pair: each pair takes the smaller of its two ranks'
// counts, and the stream striped over them (128 KiB per socket in turn) comes
// out whole: 800 KB per allreduce crosses many stripes in both directions.
TEST(tcp_links_stripe_over_several_sockets) {
  MemoryStore store;
  for (int round = 0; round < 2; ++round) {
    allreduceOverMesh(
        4,
        [&](int r) {
          MeshOptions mo;
          mo.transport = "tcp";
          mo.tcpStreams = r + 1;
          return mo;
        },
        [&](int, int) { return "tcp"; }, "striped-test-" + std::to_string(round), store,
        [&](int r, Communicator& comm) {
          for (int q = 0; q < 4; ++q)
            if (q != r) CHECK_EQ(dynamic_cast<TcpLink&>(comm.link(q)).streams(), std::min(r, q) + 1);
        });
  }
}

// Two emulated hosts of two ranks: shm inside a host, tcp between hosts; rank
// 1 accepts ranks 2 and 3 in whatever order they connect.
TEST(mixed_mesh_picks_per_peer_by_priority) {
  MemoryStore store;
  auto host = [](int r) { return r < 2 ? 0 : 1; };
  allreduceOverMesh(
      4,
      [&](int r) {
        MeshOptions mo;
        mo.hostIdentity = "emulated-host-" + std::to_string(host(r));
        mo.useMpi = false;
        return mo;
      },
      [&](int r, int q) { return host(r) == host(q) ? "shm" : "tcp"; }, "mixed-test", store);
}

// One rank forcing tcp makes its pairs tcp on both ends; the rest keep shm.
TEST(a_transport_forced_by_one_end_holds_for_the_pair) {
  MemoryStore store;
  allreduceOverMesh(
      3,
      [&](int r) {
        MeshOptions mo;
        if (r == 2) mo.transport = "tcp";
        return mo;
      },
      [&](int r, int q) { return r == 2 || q == 2 ? "tcp" : "shm"; }, "forced-test", store);
}

// The error each of two ranks gets from connecting with these options.
std::vector<std::string> connectErrors(const OptionsOf& optionsOf) {
  MemoryStore store;
  std::vector<std::string> errors(2);
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        Communicator::connectMesh(store, "refused", r, 2, optionsOf(r), Deadline::after(std::chrono::seconds(5)));
      } catch (const Error& e) {
        errors[r] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  return errors;
}

TEST(conflicting_forced_transports_are_named) {
  auto errors = connectErrors([](int r) {
    MeshOptions mo;
    mo.transport = r == 0 ? "shm" : "tcp";
    return mo;
  });
  CHECK(errors[0].find("rank 0 forces transport shm but rank 1 forces tcp") != std::string::npos);
  CHECK(errors[1].find("rank 1 forces transport tcp but rank 0 forces shm") != std::string::npos);
}

TEST(shm_forced_across_hosts_says_why) {
  auto errors = connectErrors([](int r) {
    MeshOptions mo;
    mo.transport = "shm";
    mo.hostIdentity = "host-" + std::to_string(r);
    return mo;
  });
  CHECK(errors[0].find("no transport connects rank 0 with rank 1 (transport shm is forced): shm: rank 1 is on "
                       "another host") != std::string::npos);
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
