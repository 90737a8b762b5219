#include "html_report/svg.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace gp::plan_report {
namespace {

// Coordinates with one decimal: enough for pixels, and short files.
std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f", std::isfinite(v) ? v : 0.0);
  return buf;
}

}  // namespace

std::string xml_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '&':
        out += "&amp;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string shorten(std::string_view text, size_t max_chars) {
  if (text.size() <= max_chars) return std::string(text);
  size_t cut = max_chars > 3 ? max_chars - 3 : 0;
  // Back off continuation bytes (10xxxxxx) so that a multi-byte character stays whole.
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  return std::string(text.substr(0, cut)) + "...";
}

std::string num(double value, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", decimals, value);
  return buf;
}

Svg::Svg(double width, double height, std::string_view label)
    : width_(width), height_(height), label_(label) {}

void Svg::rect(double x, double y, double w, double h, std::string_view fill,
               std::string_view stroke, double stroke_width, std::string_view tooltip) {
  body_ += "<rect x=\"" + px(x) + "\" y=\"" + px(y) + "\" width=\"" + px(std::max(w, 0.0)) +
           "\" height=\"" + px(std::max(h, 0.0)) + "\" fill=\"" + xml_escape(fill) +
           "\" stroke=\"" + xml_escape(stroke) + "\" stroke-width=\"" + px(stroke_width) + "\"";
  if (tooltip.empty()) {
    body_ += "/>\n";
  } else {
    body_ += "><title>" + xml_escape(tooltip) + "</title></rect>\n";
  }
}

void Svg::line(double x1, double y1, double x2, double y2, std::string_view stroke, double width,
               bool dashed, bool arrow) {
  body_ += "<line x1=\"" + px(x1) + "\" y1=\"" + px(y1) + "\" x2=\"" + px(x2) + "\" y2=\"" +
           px(y2) + "\" stroke=\"" + xml_escape(stroke) + "\" stroke-width=\"" + px(width) + "\"";
  if (dashed) body_ += " stroke-dasharray=\"6 4\"";
  if (arrow) {
    body_ += " marker-end=\"url(#arrow)\"";
    uses_arrow_ = true;
  }
  body_ += "/>\n";
}

void Svg::text(double x, double y, std::string_view content, const TextStyle& style) {
  body_ += "<text x=\"" + px(x) + "\" y=\"" + px(y) + "\" font-size=\"" +
           std::to_string(style.size) + "\" text-anchor=\"" + style.anchor + "\" fill=\"" +
           style.fill + "\"" + (style.bold ? " font-weight=\"bold\"" : "") + ">" +
           xml_escape(content) + "</text>\n";
}

void Svg::polyline(const std::vector<std::pair<double, double>>& points, std::string_view stroke,
                   double width) {
  std::string run;
  int n = 0;
  auto flush = [&] {
    if (n >= 2) {
      body_ += "<polyline fill=\"none\" stroke=\"" + xml_escape(stroke) + "\" stroke-width=\"" +
               px(width) + "\" points=\"" + run + "\"/>\n";
    } else if (n == 1) {
      // A lone point between gaps still shows, as a dot.
      const size_t comma = run.find(',');
      body_ += "<circle cx=\"" + run.substr(0, comma) + "\" cy=\"" + run.substr(comma + 1) +
               "\" r=\"2\" fill=\"" + xml_escape(stroke) + "\"/>\n";
    }
    run.clear();
    n = 0;
  };
  for (const auto& [x, y] : points) {
    if (!std::isfinite(x) || !std::isfinite(y)) {
      flush();
      continue;
    }
    run += (n > 0 ? " " : "") + px(x) + "," + px(y);
    ++n;
  }
  flush();
}

std::string Svg::str() {
  std::string out = "<svg width=\"" + px(width_) + "\" height=\"" + px(height_) +
                    "\" viewBox=\"0 0 " + px(width_) + " " + px(height_) +
                    "\" role=\"img\" aria-label=\"" + xml_escape(label_) + "\">\n";
  if (uses_arrow_) {
    out +=
        "<defs><marker id=\"arrow\" viewBox=\"0 0 10 10\" refX=\"10\" refY=\"5\" "
        "markerWidth=\"8\" markerHeight=\"8\" orient=\"auto-start-reverse\">"
        "<path d=\"M 0 0 L 10 5 L 0 10 z\" fill=\"#555\"/></marker></defs>\n";
  }
  return out + body_ + "</svg>\n";
}

}  // namespace gp::plan_report
