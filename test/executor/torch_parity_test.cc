// The CPU kernels of the general element-wise ops, reductions and upsampling ops against
// PyTorch: test/data/op_parity/cases.txt holds, for op cases of test/support/op_cases.h, the
// inputs, parameters and output gradient, and what PyTorch computed from them (its forward
// output and its gradients; written by tools/torch-check/make_op_parity.py).
#include <catch2/catch.hpp>
#include <cmath>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../support/op_cases.h"

namespace gp::testing {
namespace {

struct ParityCase {
  std::string name;
  std::map<std::string, std::vector<float>> values;  // "in0", "param0", "gout", "out", "gin0", ...
};

std::vector<ParityCase> read_cases() {
  std::ifstream in(std::string(GP_TEST_DATA_DIR) + "/op_parity/cases.txt");
  REQUIRE(in.good());
  std::vector<ParityCase> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("case ", 0) == 0) {
      cases.push_back({line.substr(5), {}});
    } else if (!line.empty() && line[0] != '#' && line != "end") {
      REQUIRE(!cases.empty());
      std::istringstream fields(line);
      std::string key;
      size_t n = 0;
      fields >> key >> n;
      std::vector<float>& v = cases.back().values[key];
      v.resize(n);
      for (float& x : v) fields >> x;
      REQUIRE(!fields.fail());
    }
  }
  return cases;
}

// Within 2e-5 of PyTorch, relative to the larger of 1 and PyTorch's magnitude (fp32 on both
// sides, summed in other orders).
void check_close(const std::vector<float>& ours, const std::vector<float>& torch,
                 const std::string& what) {
  REQUIRE(ours.size() == torch.size());
  for (size_t i = 0; i < ours.size(); ++i) {
    INFO(what << "[" << i << "]: ours " << ours[i] << ", PyTorch " << torch[i]);
    CHECK(std::abs(ours[i] - torch[i]) <= 2e-5 * std::max(1.0f, std::abs(torch[i])));
  }
}

}  // namespace

TEST_CASE(
    "general element-wise, reduction and upsampling kernels match PyTorch's forward and "
    "gradients") {
  const auto parity = read_cases();
  REQUIRE(parity.size() >= 35);
  std::map<std::string, GradCase> by_name;
  for (GradCase& c : grad_cases()) by_name.emplace(c.name, std::move(c));
  for (const ParityCase& p : parity) {
    DYNAMIC_SECTION(p.name) {
      const auto it = by_name.find(p.name);
      REQUIRE(it != by_name.end());  // the data names an op case of op_cases.h
      Harness h = make_harness(it->second.model(), 2);
      for (size_t k = 0; k < h.fin.size(); ++k) {
        const auto& v = p.values.at("in" + std::to_string(k));
        REQUIRE(v.size() == h.fin[k].size());
        h.fin[k] = v;
      }
      for (size_t k = 0; k < h.params.size(); ++k) {
        const auto& v = p.values.at("param" + std::to_string(k));
        REQUIRE(v.size() == h.params[k].size());
        h.params[k] = v;
      }
      h.gout = p.values.at("gout");
      REQUIRE(h.gout.size() == h.out.size());
      h.forward();
      check_close(h.out, p.values.at("out"), "out");
      h.zero_grads();
      h.backward();
      for (size_t k = 0; k < h.gin.size(); ++k) {
        check_close(h.gin[k], p.values.at("gin" + std::to_string(k)), "gin" + std::to_string(k));
      }
      for (size_t k = 0; k < h.gparams.size(); ++k) {
        check_close(h.gparams[k], p.values.at("gparam" + std::to_string(k)),
                    "gparam" + std::to_string(k));
      }
    }
  }
}

}  // namespace gp::testing
