#include <optional>
#include <string>

#include "compress/codec.h"
#include "compress/compressed_allreduce.h"
#include "compress/random.h"
#include "torch/bindings.h"
#include "torch/tensor_codecs.h"

namespace scalecomm {

namespace {

// The codecs take float32 host memory: x's values as a contiguous float32 CPU copy.
at::Tensor hostFloats(const at::Tensor& x) { return x.reshape({-1}).to(at::kCPU, at::kFloat).contiguous().clone(); }

at::Tensor emptyBytes(int64_t n) { return at::empty({n}, at::TensorOptions().dtype(at::kByte)); }

}  // namespace

void bindCodecs(py::module& m, py::module& testing) {
  m.def(
      "codec_roundtrip",
      [](const at::Tensor& x, const std::string& spec, uint64_t seed, int rank) {
        const std::unique_ptr<Codec> codec = valueErrors([&] { return makeCodec(CodecSpec::parse(spec)); });
        at::Tensor flat = hostFloats(x);
        const int64_t n = flat.numel();
        at::Tensor payload = emptyBytes(codec->payloadBytes(n));
        codec->encode(flat.data_ptr<float>(), nullptr, n, payload.data_ptr<uint8_t>(), seed, rank);
        at::Tensor out = at::zeros_like(flat);
        codec->decodeAdd(out.data_ptr<float>(), n, payload.data_ptr<uint8_t>(), seed);
        return py::make_tuple(out.to(x.device()), payload.to(x.device()), payload.numel(), codec->summable());
      },
      py::arg("x"), py::arg("compression"), py::arg("seed") = 0, py::arg("rank") = 0,
      "One rank's codec round trip: (decoded float32, payload bytes, wire bytes, summable). The parameter server "
      "encodes its pushes with it (the decoded tensor gives the error-feedback residual).");
  m.def(
      "codec_decode_add",
      [](at::Tensor& out, const at::Tensor& payload, const std::string& spec, uint64_t seed) {
        const std::unique_ptr<Codec> codec = valueErrors([&] { return makeCodec(CodecSpec::parse(spec)); });
        if (out.scalar_type() != at::kFloat || out.dim() != 1 || !out.is_contiguous() || !out.is_cpu() ||
            payload.numel() * payload.element_size() != codec->payloadBytes(out.numel())) {
          throw py::value_error("codec_decode_add: a contiguous 1-D float32 CPU out and the payload " + spec +
                                " encodes for its size (" + std::to_string(codec->payloadBytes(out.numel())) +
                                " bytes)");
        }
        const at::Tensor bytes = payload.to(at::kCPU).contiguous().view(at::kByte);
        codec->decodeAdd(out.data_ptr<float>(), out.numel(), bytes.data_ptr<uint8_t>(), seed);
      },
      py::arg("out"), py::arg("payload"), py::arg("compression"), py::arg("seed") = 0,
      "out += the decoded payload (one rank's, encoded with the same compression and seed).");
  m.def(
      "compressed_wire_bytes",
      [](const std::string& spec, int64_t numel) {
        return valueErrors([&] { return compressedWireBytes(CodecSpec::parse(spec), numel); });
      },
      py::arg("compression"), py::arg("numel"),
      "Bytes one rank sends in a compressed allreduce of numel float32 elements.");
  testing.def(
      "codec_encode",
      [](const at::Tensor& x, std::optional<at::Tensor> residual, const std::string& spec, uint64_t seed, int rank) {
        const std::unique_ptr<Codec> codec = valueErrors([&] { return makeCodec(CodecSpec::parse(spec)); });
        at::Tensor flat = hostFloats(x);
        const int64_t n = flat.numel();
        std::optional<at::Tensor> r;
        if (residual) r = hostFloats(*residual);
        if (r && r->numel() != n) throw py::value_error("codec_encode: the residual must have x's numel");
        at::Tensor payload = emptyBytes(codec->payloadBytes(n));
        codec->encode(flat.data_ptr<float>(), r ? r->data_ptr<float>() : nullptr, n, payload.data_ptr<uint8_t>(), seed,
                      rank);
        at::Tensor out = at::zeros_like(flat);
        codec->decodeAdd(out.data_ptr<float>(), n, payload.data_ptr<uint8_t>(), seed);
        return py::make_tuple(out, payload, r ? py::cast(*r) : py::none());
      },
      py::arg("x"), py::arg("residual"), py::arg("compression"), py::arg("seed") = 0, py::arg("rank") = 0,
      "A codec's encode with error feedback, for tests: (decoded, payload, the new residual or None).");
  testing.def(
      "codec_random",
      [](const std::string& kind, uint64_t seed, int64_t count, int64_t n) {
        if (kind == "index") {
          at::Tensor t = at::empty({count}, at::TensorOptions().dtype(at::kLong));
          int64_t* p = t.data_ptr<int64_t>();
          for (int64_t i = 0; i < count; ++i) p[i] = codec_random::index(seed, i, n);
          return t;
        }
        at::Tensor t = at::empty({count}, at::TensorOptions().dtype(at::kFloat));
        float* p = t.data_ptr<float>();
        if (kind == "uniform") {
          for (int64_t i = 0; i < count; ++i) p[i] = codec_random::uniform(seed, i);
        } else if (kind == "normal") {
          for (int64_t i = 0; i < count; ++i) p[i] = codec_random::normal(seed, i);
        } else {
          throw py::value_error("codec_random: kind is index, uniform or normal");
        }
        return t;
      },
      py::arg("kind"), py::arg("seed"), py::arg("count"), py::arg("n") = 1,
      "The codecs' random draws (compress/random.h), for the test oracles: count draws of the stream `seed`.");
  testing.def(
      "tensor_codec_encode",
      [](const at::Tensor& x, std::optional<at::Tensor> residual, const std::string& spec, uint64_t seed, int rank) {
        const CodecSpec parsed = valueErrors([&] { return CodecSpec::parse(spec); });
        if (!parsed.entry->make) throw py::value_error("tensor_codec_encode: " + spec + " has no one-round codec");
        at::Tensor flat = x.reshape({-1}).to(at::kFloat).contiguous().clone();
        std::optional<at::Tensor> r;
        if (residual) r = residual->reshape({-1}).to(flat.options()).contiguous().clone();
        if (r && r->numel() != flat.numel())
          throw py::value_error("tensor_codec_encode: the residual must have x's numel");
        auto [payload, decoded] =
            valueErrors([&] { return encodeTensor(flat, r ? &*r : nullptr, parsed, seed, rank); });
        return py::make_tuple(decoded, payload, r ? py::cast(*r) : py::none());
      },
      py::arg("x"), py::arg("residual"), py::arg("compression"), py::arg("seed") = 0, py::arg("rank") = 0,
      "codec_encode through the codecs' torch form, on x's device: (decoded, payload, the new residual or None).");
  testing.def(
      "codec_draws", [](uint64_t seed, const at::Tensor& i) { return randomDraws(seed, i.to(at::kLong)); },
      py::arg("seed"), py::arg("i"),
      "The codecs' random draws computed as torch operations on i's device (int64 bits of codec_random::draw).");
}

}  // namespace scalecomm
