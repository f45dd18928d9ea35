//===- gradcheck.cpp - --gradcheck: finite differences of the loss --------===//
//
// Every call is step 1 with the same seed, so dropout masks repeat and the
// loss is a smooth function of each parameter. One rank only
// (parseOptions refuses it otherwise).
//
//===----------------------------------------------------------------------===//

#include "program/gradcheck.h"
#include "program/convert.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>

namespace dsc::program {

Status gradcheck(Job &job, Ranks &ranks, bool &passed) {
  const ProgramSpec &spec = job.spec;
  const Layout &layout = job.layout;
  const Options &o = job.o;
  std::FILE *out = job.out;
  RankState &rank0 = ranks.rank0();

  std::vector<Tensor> &results = rank0.results;
  for (int i = 0; i < spec.numArgs; ++i)
    if (spec.args[i].role == ArgRole::Step)
      setIntScalar(rank0.args[i], 1);
  auto lossAt = [&](double &loss) -> Status {
    // The compute copies follow the perturbed parameters.
    Status s = ranks.fillComputeCopies();
    if (s.ok())
      s = ranks.stepOn(rank0, 1, /*all=*/true);
    if (s.ok())
      loss = scalarValue(results[layout.loss]);
    return s;
  };
  auto get = [](const Tensor &t, int64_t i) {
    return t.dtype == DType::F64 ? t.as<double>()[i] : double(t.as<float>()[i]);
  };
  auto set = [](const Tensor &t, int64_t i, double v) {
    if (t.dtype == DType::F64)
      t.as<double>()[i] = v;
    else
      t.as<float>()[i] = float(v);
  };
  double base = 0;
  if (Status s = lossAt(base); !s.ok())
    return s;
  if (Status s = ranks.fetch(layout.grads, /*args=*/false); !s.ok())
    return s;
  // Gradients returned unnormalized ({dsc.grad_normalizer}) are multiplied
  // as the step's dsc.mul would have.
  if (layout.gradNormalizer >= 0)
    if (Status s = ranks.fetch({layout.gradNormalizer}, /*args=*/false);
        !s.ok())
      return s;
  const double normalizer = layout.gradNormalizer >= 0
                                ? scalarValue(results[layout.gradNormalizer])
                                : 1.0;
  std::vector<std::vector<double>> analytic;
  for (int r : layout.grads) {
    const Tensor &g = results[r];
    if (g.dtype != DType::F64 && g.dtype != DType::F32)
      return Status::error(StatusCode::Unimplemented,
                           "--gradcheck supports float32 and float64 "
                           "parameters only");
    analytic.emplace_back(g.numel());
    for (int64_t i = 0; i < g.numel(); ++i)
      analytic.back()[i] = layout.gradNormalizer < 0
                               ? get(g, i)
                               : mulRounded(get(g, i), normalizer, g.dtype);
  }
  double worst = 0, tolUsed = 0;
  for (size_t k = 0; k < layout.grads.size(); ++k) {
    const char *name = spec.results[layout.grads[k]].name;
    int a = -1;
    for (int i : layout.params)
      if (std::string(spec.args[i].name) == name)
        a = i;
    if (a < 0)
      continue;
    const Tensor &p = rank0.args[a];
    bool f64 = p.dtype == DType::F64;
    double h = f64 ? 1e-5 : 1e-2;
    double tol = o.gradcheckTol > 0 ? o.gradcheckTol : (f64 ? 1e-6 : 2e-2);
    tolUsed = std::max(tolUsed, tol);
    int64_t n = p.numel(), count = std::min<int64_t>(n, o.gradcheck);
    double maxErr = 0;
    for (int64_t j = 0; j < count; ++j) {
      int64_t idx =
          count == n ? j : j * (n - 1) / std::max<int64_t>(count - 1, 1);
      double orig = get(p, idx), lp = 0, lm = 0;
      set(p, idx, orig + h);
      Status sp = lossAt(lp);
      set(p, idx, orig - h);
      Status sm = lossAt(lm);
      set(p, idx, orig);
      if (!sp.ok())
        return sp;
      if (!sm.ok())
        return sm;
      double fd = (lp - lm) / (2 * h), an = analytic[k][idx];
      double err =
          std::fabs(fd - an) / std::max({std::fabs(fd), std::fabs(an), 1e-3});
      maxErr = std::max(maxErr, err);
    }
    worst = std::max(worst, maxErr / tol);
    std::fprintf(out,
                 "gradcheck %-40s %6" PRId64 " of %8" PRId64
                 " elements | max rel error %.2e%s\n",
                 name, count, n, maxErr, maxErr > tol ? "  <-- FAIL" : "");
  }
  bool ok = worst <= 1.0;
  std::fprintf(out, "gradcheck: loss %.10g | %s (bound %.0e)\n", base,
               ok ? "OK" : "FAILED", tolUsed);
  std::fflush(out);
  passed = ok;
  return Status();
}

} // namespace dsc::program
