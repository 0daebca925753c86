// A renderer for exactly the Jinja2 subset FlashInfer 0.6.3's kernel templates use:
//   {{ name }}                                    variable substitution
//   {% for v in [16, 64, 128] %} ... {% endfor %}   loops over literal int/string lists (nestable)
// with Jinja2's defaults: trim_blocks/lstrip_blocks off (text around tags is kept verbatim) and
// keep_trailing_newline off (one newline at the very end of the template is dropped).
#include <cctype>
#include <memory>
#include <string>
#include <vector>

#include "jit/jit.hpp"

namespace flashcpp::jit {
namespace {

struct Node {
  enum Kind { text, var, loop } kind = text;
  std::string value;              // text, variable name, or loop variable
  std::vector<std::string> items;  // loop items (already rendered)
  std::vector<Node> body;          // loop body
};

class Parser {
 public:
  Parser(std::string_view src, std::string_view name) : s_(src), name_(name) {}

  std::vector<Node> parse_all() {
    auto nodes = parse_until(false);
    return nodes;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error(ErrorCode::invalid_argument, "jit: template " + std::string(name_) + ": " + what);
  }

  static std::string_view trim(std::string_view v) {
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.front()))) v.remove_prefix(1);
    while (!v.empty() && std::isspace(static_cast<unsigned char>(v.back()))) v.remove_suffix(1);
    return v;
  }

  static bool is_identifier(std::string_view v) {
    if (v.empty() || !(std::isalpha(static_cast<unsigned char>(v[0])) || v[0] == '_')) return false;
    for (char c : v)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_')) return false;
    return true;
  }

  // Parses nodes until the end (in_loop false) or a matching {% endfor %} (in_loop true).
  std::vector<Node> parse_until(bool in_loop) {
    std::vector<Node> out;
    while (pos_ < s_.size()) {
      size_t open = s_.find('{', pos_);
      while (open != std::string_view::npos && open + 1 < s_.size() && s_[open + 1] != '{' && s_[open + 1] != '%' &&
             s_[open + 1] != '#')
        open = s_.find('{', open + 1);
      if (open == std::string_view::npos || open + 1 >= s_.size()) {
        out.push_back({Node::text, std::string(s_.substr(pos_)), {}, {}});
        pos_ = s_.size();
        break;
      }
      if (open > pos_) out.push_back({Node::text, std::string(s_.substr(pos_, open - pos_)), {}, {}});
      const char kind = s_[open + 1];
      if (kind == '#') fail("comments ({# #}) are not supported");
      const std::string_view close_tag = kind == '{' ? "}}" : "%}";
      const size_t close = s_.find(close_tag, open + 2);
      if (close == std::string_view::npos) fail("unterminated tag at offset " + std::to_string(open));
      std::string_view inner = s_.substr(open + 2, close - open - 2);
      if (!inner.empty() && (inner.front() == '-' || inner.front() == '+')) fail("whitespace control is not supported");
      if (!inner.empty() && (inner.back() == '-' || inner.back() == '+')) fail("whitespace control is not supported");
      inner = trim(inner);
      pos_ = close + 2;
      if (kind == '{') {
        if (!is_identifier(inner)) fail("only plain variables are supported in {{ }}, got '" + std::string(inner) + "'");
        out.push_back({Node::var, std::string(inner), {}, {}});
        continue;
      }
      if (inner == "endfor") {
        if (!in_loop) fail("{% endfor %} without {% for %}");
        return out;
      }
      out.push_back(parse_for(inner));
    }
    if (in_loop) fail("{% for %} without {% endfor %}");
    return out;
  }

  // "for <id> in [<lit>, <lit>, ...]"
  Node parse_for(std::string_view stmt) {
    if (stmt.substr(0, 4) != "for ") fail("unsupported statement '{% " + std::string(stmt) + " %}'");
    stmt.remove_prefix(4);
    const size_t in = stmt.find(" in ");
    if (in == std::string_view::npos) fail("malformed for statement");
    Node loop;
    loop.kind = Node::loop;
    loop.value = std::string(trim(stmt.substr(0, in)));
    if (!is_identifier(loop.value)) fail("malformed loop variable '" + loop.value + "'");
    std::string_view list = trim(stmt.substr(in + 4));
    if (list.size() < 2 || list.front() != '[' || list.back() != ']') fail("for loops must iterate a literal list");
    list = list.substr(1, list.size() - 2);
    while (!trim(list).empty()) {
      const size_t comma = list.find(',');
      std::string_view item = trim(list.substr(0, comma));
      list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
      if (item.size() >= 2 && (item.front() == '"' || item.front() == '\'') && item.back() == item.front()) {
        loop.items.emplace_back(item.substr(1, item.size() - 2));
      } else if (!item.empty() && (std::isdigit(static_cast<unsigned char>(item[0])) || item[0] == '-')) {
        for (char c : item.substr(1))
          if (!std::isdigit(static_cast<unsigned char>(c))) fail("bad list item '" + std::string(item) + "'");
        loop.items.emplace_back(item);
      } else {
        fail("bad list item '" + std::string(item) + "'");
      }
    }
    loop.body = parse_until(true);
    return loop;
  }

  std::string_view s_;
  std::string_view name_;
  size_t pos_ = 0;
};

struct Scope {
  const std::map<std::string, std::string>& vars;
  const Scope* parent = nullptr;
  const std::string* loop_name = nullptr;
  const std::string* loop_value = nullptr;

  const std::string* find(const std::string& name) const {
    if (loop_name && *loop_name == name) return loop_value;
    if (parent) return parent->find(name);
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : &it->second;
  }
};

void render_nodes(const std::vector<Node>& nodes, const Scope& scope, std::string& out, std::string_view name) {
  for (const Node& n : nodes) {
    switch (n.kind) {
      case Node::text: out += n.value; break;
      case Node::var: {
        const std::string* v = scope.find(n.value);
        if (!v)
          throw Error(ErrorCode::invalid_argument,
                      "jit: template " + std::string(name) + " uses undefined variable '" + n.value + "'");
        out += *v;
        break;
      }
      case Node::loop:
        for (const std::string& item : n.items) {
          Scope inner{scope.vars, &scope, &n.value, &item};
          render_nodes(n.body, inner, out, name);
        }
        break;
    }
  }
}

}  // namespace

std::string render_template(std::string_view text, const std::map<std::string, std::string>& vars,
                            std::string_view template_name) {
  // Jinja2 (keep_trailing_newline=False) drops a single trailing newline of the source.
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  Parser parser(text, template_name);
  const std::vector<Node> nodes = parser.parse_all();
  std::string out;
  out.reserve(text.size() + 256);
  Scope root{vars};
  render_nodes(nodes, root, out, template_name);
  return out;
}

}  // namespace flashcpp::jit
