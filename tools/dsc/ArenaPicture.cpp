//===- ArenaPicture.cpp - the arena over one step, as an SVG --------------===//
//
// `dsc compile --arena-svg FILE`: the code generator's static plan drawn as
// offset over time, the picture of what --report's peak breakdown sums up.
//
//===----------------------------------------------------------------------===//
#include "tools/dsc/ArenaPicture.h"
#include "tools/dsc/MemoryReport.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

namespace dsc {
namespace {

// The canvas, in pixels: the plot, and the legend to its right.
constexpr double kWidth = 1280, kHeight = 720;
constexpr double kLeft = 100, kRight = 320, kTop = 60, kBottom = 70;
constexpr double kPlotW = kWidth - kLeft - kRight;
constexpr double kPlotH = kHeight - kTop - kBottom;
// Buffers drawn one by one at most (the largest on screen); the others,
// and all under a pixel, become cells of kCell x kCell pixels.
constexpr size_t kMaxRects = 20000;
constexpr double kCell = 2;
// One colour per kArenaKinds entry.
const char *const kColours[] = {"#4e79a7", "#f28e2b", "#59a14f", "#e15759",
                                "#b07aa1"};
static_assert(std::size(kColours) == std::size(kArenaKinds),
              "a colour per arena kind");

std::string escape(llvm::StringRef text) {
  std::string s;
  for (char c : text) {
    switch (c) {
    case '&':
      s += "&amp;";
      break;
    case '<':
      s += "&lt;";
      break;
    case '>':
      s += "&gt;";
      break;
    case '"':
      s += "&quot;";
      break;
    default:
      s += c;
    }
  }
  return s;
}

std::string num(double v) { return llvm::formatv("{0:f2}", v).str(); }

int kindIndex(llvm::StringRef kind) {
  for (auto [i, k] : llvm::enumerate(kArenaKinds))
    if (kind == k.name)
      return static_cast<int>(i);
  return 1; // a temporary
}

/// Maps the op clock to x and arena bytes to y (offset 0 at the bottom).
struct Scale {
  double ops, bytes;
  double x(double tick) const { return kLeft + tick / ops * kPlotW; }
  double y(double offset) const {
    return kTop + kPlotH - offset / bytes * kPlotH;
  }
};

/// The first of 1, 2, 5 x 10^k at least `v`.
double niceStep(double v) {
  double p = std::pow(10, std::floor(std::log10(std::max(v, 1e-9))));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= v)
      return m * p;
  return 10 * p;
}

/// Where the most bytes are alive: the tick and the bytes.
std::pair<int64_t, uint64_t> mostAlive(const EmitCppStats &stats) {
  std::vector<int64_t> delta(stats.timelineOps + 1);
  for (const EmitCppStats::ArenaBuffer &b : stats.timeline) {
    delta[b.first] += static_cast<int64_t>(b.bytes);
    delta[b.last + 1] -= static_cast<int64_t>(b.bytes);
  }
  int64_t live = 0, best = 0, at = 0;
  for (int64_t t = 0; t < stats.timelineOps; ++t) {
    live += delta[t];
    if (live > best)
      best = live, at = t;
  }
  return {at, static_cast<uint64_t>(best)};
}

void writeAxes(llvm::raw_ostream &os, const Scale &s) {
  os << llvm::formatv("<rect class=\"frame\" x=\"{0}\" y=\"{1}\" "
                      "width=\"{2}\" height=\"{3}\"/>\n",
                      kLeft, kTop, kPlotW, kPlotH);
  // y: a unit the top reaches, and 1-2-5 steps of it.
  const char *units[] = {"B", "KiB", "MiB", "GiB"};
  int u = 0;
  while (u < 3 && s.bytes >= std::pow(1024.0, u + 1))
    ++u;
  double unit = std::pow(1024.0, u);
  double step = niceStep(s.bytes / unit / 6) * unit;
  for (double b = 0; b <= s.bytes * 1.0001; b += step)
    os << llvm::formatv("<line class=\"grid\" x1=\"{0}\" x2=\"{1}\" "
                        "y1=\"{2}\" y2=\"{2}\"/><text class=\"ytick\" "
                        "x=\"{3}\" y=\"{4}\">{5} {6}</text>\n",
                        kLeft, kLeft + kPlotW, num(s.y(b)), kLeft - 6,
                        num(s.y(b) + 4), b / unit, units[u]);
  double tickOps = niceStep(s.ops / 8);
  for (double t = 0; t <= s.ops; t += tickOps)
    os << llvm::formatv("<text class=\"xtick\" x=\"{0}\" y=\"{1}\">{2}"
                        "</text>\n",
                        num(s.x(t)), kTop + kPlotH + 16, int64_t(t));
  os << llvm::formatv("<text class=\"label\" x=\"{0}\" y=\"{1}\">op of the "
                      "step (callees spliced in at their calls)</text>\n",
                      kLeft + kPlotW / 2, kHeight - 24);
  os << llvm::formatv("<text class=\"label\" transform=\"translate(20,{0}) "
                      "rotate(-90)\">arena offset</text>\n",
                      kTop + kPlotH / 2);
}

void writePhases(llvm::raw_ostream &os, const EmitCppStats &stats,
                 const Scale &s) {
  for (const EmitCppStats::PhaseMark &p : stats.phases)
    os << llvm::formatv("<line class=\"phase\" x1=\"{0}\" x2=\"{0}\" "
                        "y1=\"{1}\" y2=\"{2}\"/><text class=\"phaselabel\" "
                        "x=\"{3}\" y=\"{4}\">{5}</text>\n",
                        num(s.x(p.at)), kTop - 4, kTop + kPlotH,
                        num(s.x(p.at) + 3), kTop - 8, p.name);
}

/// What the drawing of the buffers came to, for the legend.
struct Drawn {
  int64_t count[std::size(kArenaKinds)] = {};
  uint64_t largest[std::size(kArenaKinds)] = {};
  int64_t merged = 0, cells = 0;
};

std::string tooltip(const EmitCppStats::ArenaBuffer &b) {
  return escape(llvm::formatv("{0}{1} in @{2}: {3}, {4} at offset {5}, ops "
                              "{6}-{7} ({8})",
                              b.op, b.node.empty() ? "" : " [" + b.node + "]",
                              b.function, b.type, humanBytes(double(b.bytes)),
                              b.offset, b.first, b.last, b.kind)
                    .str());
}

Drawn writeBuffers(llvm::raw_ostream &os, const EmitCppStats &stats,
                   const Scale &s) {
  Drawn drawn;
  // On-screen size of each buffer; the largest are drawn one by one.
  auto width = [&](const EmitCppStats::ArenaBuffer &b) {
    return s.x(b.last + 1) - s.x(b.first);
  };
  auto height = [&](const EmitCppStats::ArenaBuffer &b) {
    return s.y(b.offset) - s.y(b.offset + b.bytes);
  };
  std::vector<const EmitCppStats::ArenaBuffer *> order;
  for (const EmitCppStats::ArenaBuffer &b : stats.timeline) {
    int k = kindIndex(b.kind);
    ++drawn.count[k];
    drawn.largest[k] = std::max(drawn.largest[k], b.bytes);
    order.push_back(&b);
  }
  // Largest first; ties in timeline order (the pointers are into it). Not
  // stable_sort: libstdc++ 12's under clang warns of a deprecated buffer.
  llvm::sort(order, [&](auto *a, auto *b) {
    double areaA = width(*a) * height(*a), areaB = width(*b) * height(*b);
    return areaA != areaB ? areaA > areaB : a < b;
  });
  // (kind, column, row) -> buffers merged into that cell.
  std::map<std::tuple<int, int, int>, int64_t> cells;
  for (auto [i, b] : llvm::enumerate(order)) {
    double w = width(*b), h = height(*b);
    int k = kindIndex(b->kind);
    if (i >= kMaxRects || w * h < 1) {
      ++drawn.merged;
      ++cells[{k, int((s.x(b->first) + w / 2) / kCell),
               int((s.y(b->offset) - h / 2) / kCell)}];
      continue;
    }
    os << llvm::formatv("<rect class=\"k{0}\" x=\"{1}\" y=\"{2}\" "
                        "width=\"{3}\" height=\"{4}\"><title>{5}</title>"
                        "</rect>\n",
                        k, num(s.x(b->first)), num(s.y(b->offset + b->bytes)),
                        num(w), num(h), tooltip(*b));
  }
  for (auto &[key, n] : cells) {
    auto [k, cx, cy] = key;
    os << llvm::formatv("<rect class=\"k{0} cell\" x=\"{1}\" y=\"{2}\" "
                        "width=\"{3}\" height=\"{3}\"><title>{4} small {5} "
                        "buffer(s)</title></rect>\n",
                        k, cx * kCell, cy * kCell, kCell, n,
                        kArenaKinds[k].name);
  }
  drawn.cells = static_cast<int64_t>(cells.size());
  return drawn;
}

void writePeak(llvm::raw_ostream &os, const EmitCppStats &stats, const Scale &s,
               uint64_t highest) {
  auto [at, alive] = mostAlive(stats);
  os << llvm::formatv("<line class=\"peak\" x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" "
                      "y2=\"{2}\"/><text class=\"peaklabel\" x=\"{3}\" "
                      "y=\"{4}\">peak: arena {5}</text>\n",
                      kLeft, kLeft + kPlotW, num(s.y(highest)),
                      kLeft + kPlotW - 4, num(s.y(highest) + 14),
                      humanBytes(double(highest)));
  os << llvm::formatv("<line class=\"alive\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" "
                      "y2=\"{2}\"><title>most alive at once: {3} at op {4}"
                      "</title></line>\n",
                      num(s.x(at + 0.5)), kTop, kTop + kPlotH,
                      humanBytes(double(alive)), at);
}

void writeLegend(llvm::raw_ostream &os, const EmitCppStats &stats,
                 const Drawn &drawn) {
  double x = kLeft + kPlotW + 20, y = kTop + 10;
  os << "<g class=\"legend\">\n";
  for (auto [k, kind] : llvm::enumerate(kArenaKinds)) {
    if (!drawn.count[k])
      continue;
    os << llvm::formatv("<rect class=\"k{0}\" x=\"{1}\" y=\"{2}\" width=\"14\""
                        " height=\"14\"/><text x=\"{3}\" y=\"{4}\">{5}: {6} "
                        "buffer(s), largest {7}</text>\n",
                        k, x, y, x + 20, y + 11, kind.title, drawn.count[k],
                        humanBytes(double(drawn.largest[k])));
    y += 22;
  }
  auto [at, alive] = mostAlive(stats);
  os << llvm::formatv("<line class=\"peak\" x1=\"{0}\" x2=\"{1}\" y1=\"{2}\" "
                      "y2=\"{2}\"/><text x=\"{3}\" y=\"{4}\">peak: the "
                      "highest planned byte</text>\n",
                      x, x + 14, y + 7, x + 20, y + 11);
  y += 22;
  os << llvm::formatv("<line class=\"alive\" x1=\"{0}\" x2=\"{0}\" y1=\"{1}\" "
                      "y2=\"{2}\"/><text x=\"{3}\" y=\"{4}\">most alive at "
                      "once: {5} (op {6})</text>\n",
                      x + 7, y, y + 14, x + 20, y + 11,
                      humanBytes(double(alive)), at);
  y += 22;
  if (drawn.merged)
    os << llvm::formatv("<text x=\"{0}\" y=\"{1}\">{2} buffer(s) under a "
                        "pixel (or past the</text><text x=\"{0}\" y=\"{3}\">"
                        "{4} largest) merged into {5} cells of {6} px</text>\n",
                        x, y + 11, drawn.merged, y + 25, kMaxRects, drawn.cells,
                        kCell);
  os << "</g>\n";
}

} // namespace

void writeArenaSvg(const EmitCppStats &stats, llvm::StringRef title,
                   llvm::raw_ostream &os) {
  uint64_t highest = stats.arenaBytes;
  for (const EmitCppStats::ArenaBuffer &b : stats.timeline)
    highest = std::max(highest, b.offset + b.bytes);
  Scale s{double(std::max<int64_t>(stats.timelineOps, 1)),
          double(std::max<uint64_t>(highest, 1))};
  os << llvm::formatv("<svg xmlns=\"http://www.w3.org/2000/svg\" "
                      "width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\">\n",
                      kWidth, kHeight);
  os << "<style>\ntext { font: 12px sans-serif; }\n"
        ".frame { fill: #fafafa; stroke: #888; }\n"
        ".grid { stroke: #ddd; }\n"
        ".ytick { text-anchor: end; }\n.xtick { text-anchor: middle; }\n"
        ".label { text-anchor: middle; font-size: 13px; }\n"
        ".title { font-size: 15px; font-weight: bold; }\n"
        ".phase { stroke: #333; stroke-dasharray: 4 3; }\n"
        ".phaselabel { font-style: italic; }\n"
        ".peak { stroke: #c00; stroke-width: 1.5; stroke-dasharray: 6 3; }\n"
        ".peaklabel { fill: #c00; text-anchor: end; }\n"
        ".alive { stroke: #c00; stroke-width: 1; opacity: 0.6; }\n"
        ".cell { opacity: 0.7; }\n";
  for (auto [k, colour] : llvm::enumerate(kColours))
    os << ".k" << k << " { fill: " << colour << "; }\n";
  os << "</style>\n";
  os << llvm::formatv("<text class=\"title\" x=\"{0}\" y=\"24\">{1}: arena "
                      "{2}, {3} buffers over {4} ops</text>\n",
                      kLeft, escape(title), humanBytes(double(highest)),
                      stats.timeline.size(), stats.timelineOps);
  writeAxes(os, s);
  Drawn drawn = writeBuffers(os, stats, s);
  writePhases(os, stats, s);
  writePeak(os, stats, s, highest);
  writeLegend(os, stats, drawn);
  os << "</svg>\n";
}

} // namespace dsc
