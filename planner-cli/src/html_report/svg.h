// A small SVG/HTML text writer for the plan report: every piece of text and every attribute value
// that comes from a plan or a file goes through xml_escape, so that an op named "a<&>b" shows as
// written and cannot open a tag.
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace gp::plan_report {

// '<', '>', '&', '"' and '\'' as character references; also safe inside attribute values.
std::string xml_escape(std::string_view text);

// At most `max_chars` bytes of `text`, ending in "..." when cut, never inside a UTF-8 character.
std::string shorten(std::string_view text, size_t max_chars);

// "12.3" with up to `decimals` digits after the point (trailing zeros kept: columns line up).
std::string num(double value, int decimals = 1);

// Text style: size in pixels, anchor ("start", "middle", "end") and extra attributes.
struct TextStyle {
  int size = 12;
  const char* anchor = "start";
  const char* fill = "#222";
  bool bold = false;
};

// Builds one <svg> element. Coordinates are pixels; `tooltip` becomes a <title> child (shown
// on hover without any script).
class Svg {
 public:
  Svg(double width, double height, std::string_view label);

  void rect(double x, double y, double w, double h, std::string_view fill,
            std::string_view stroke = "none", double stroke_width = 1,
            std::string_view tooltip = "");
  void line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1,
            bool dashed = false, bool arrow = false);
  void text(double x, double y, std::string_view content, const TextStyle& style = {});
  // A polyline through `points`; a point with a NaN coordinate breaks the line there.
  void polyline(const std::vector<std::pair<double, double>>& points, std::string_view stroke,
                double width = 1.5);

  // The finished element; further calls after str() are not allowed.
  std::string str();

 private:
  std::string body_;
  bool uses_arrow_ = false;
  double width_;
  double height_;
  std::string label_;
};

}  // namespace gp::plan_report
