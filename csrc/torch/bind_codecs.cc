#include <optional>
#include <string>

#include "compress/codec.h"
#include "compress/compressed_allreduce.h"
#include "compress/topk_cpu.h"
#include "torch/bindings.h"

namespace scalecomm {

void bindCodecs(py::module& m, py::module& testing) {
  m.def(
      "codec_roundtrip",
      [](const at::Tensor& x, const std::string& spec, uint64_t seed, int rank) {
        const std::unique_ptr<Codec> codec = valueErrors([&] { return makeCodec(CodecSpec::parse(spec)); });
        at::Tensor flat = x.reshape({-1}).to(at::kFloat).contiguous();
        at::Tensor payload = codec->encode(flat, seed, rank);
        at::Tensor out = at::zeros_like(flat);
        codec->decodeAdd(out, payload, seed);
        return py::make_tuple(out, payload, codec->wireBytes(flat.numel()), codec->summable());
      },
      py::arg("x"), py::arg("compression"), py::arg("seed") = 0, py::arg("rank") = 0,
      "One rank's codec round trip: (decoded, payload, wire bytes, summable). The parameter server encodes "
      "its pushes with it (the decoded tensor gives the error-feedback residual).");
  m.def(
      "codec_decode_add",
      [](at::Tensor& out, const at::Tensor& payload, const std::string& spec, uint64_t seed) {
        const std::unique_ptr<Codec> codec = valueErrors([&] { return makeCodec(CodecSpec::parse(spec)); });
        if (out.scalar_type() != at::kFloat || out.dim() != 1 || !out.is_contiguous() ||
            payload.numel() * payload.element_size() != codec->wireBytes(out.numel())) {
          throw py::value_error("codec_decode_add: a contiguous 1-D float32 out and the payload " + spec +
                                " encodes for its size (" + std::to_string(codec->wireBytes(out.numel())) + " bytes)");
        }
        codec->decodeAdd(out, payload, seed);
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
      "fused_encode_cpu",
      [](const at::Tensor& x, std::optional<at::Tensor> residual, const std::string& spec, uint64_t seed) {
        const CodecSpec c = valueErrors([&] { return CodecSpec::parse(spec); });
        if (c.entry->fusedEncode == nullptr || !topkCpuApplies(x)) {
          throw py::value_error(
              "fused_encode_cpu: a codec with a fused CPU path (topk, topk_sampled, sign), and a "
              "contiguous float32 CPU tensor");
        }
        at::Tensor r = residual ? residual->clone() : at::Tensor();
        at::Tensor* rp = residual ? &r : nullptr;
        at::Tensor payload = c.entry->fusedEncode(x, rp, c, seed);
        at::Tensor out = at::zeros_like(x);
        c.entry->fusedDecodeAdd(out, payload, c);
        return py::make_tuple(out, payload, r);
      },
      py::arg("x"), py::arg("residual"), py::arg("compression"), py::arg("seed") = 0,
      "The fused CPU codecs of compressed allreduce (top-k, sign), for tests: (decoded, payload, new residual "
      "or None).");
}

}  // namespace scalecomm
