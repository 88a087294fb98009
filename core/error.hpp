// Errors as values: the one wire shape {"error","code","detail"} and the result type of the request path.
#pragma once

#include <boost/system/result.hpp>

#include <string>
#include <vector>

#include "core/json.hpp"

namespace baton {

// One FastAPI-style field issue: {"loc", "msg", "type", "ctx"?}. `ctx` is omitted when null.
struct issue {
  json loc;  // array: "body", then keys and indices
  std::string msg;
  std::string type;
  json ctx;
};

// What goes back to a caller. `message` is what the TypeSafe SDK's extract_message would build from
// `detail` ("<loc without body>: <msg>" joined by "; ") or a plain sentence when there are no issues.
struct error {
  int status = 500;
  std::string code;
  std::string message;
  std::vector<issue> detail;
};

template <class T>
using result = boost::system::result<T, error>;

// Builds an error whose message is derived from its issues.
error make_error(int status, std::string code, std::vector<issue> detail);
// Builds an error with a plain message and no issues.
error make_error(int status, std::string code, std::string message);

// "questions.urgency.score.criteria: List should have ..." for each issue, joined by "; ".
std::string issues_message(const std::vector<issue>& detail);

// {"error":...,"code":...,"detail":[...]} in wire form (caller key order, Python float spelling).
void render_error(const error& e, std::string& out);
std::string render_error(const error& e);
// Reads an error body in the same shape; `detail` may be absent (treated as empty).
result<error> error_from_json(const json& body, int status);

// Lets result<T>::value() throw at start-up paths, where exceptions are allowed.
[[noreturn]] void throw_exception_from_error(const error& e, const boost::source_location& loc);

class error_exception : public std::runtime_error {
 public:
  explicit error_exception(error e);
  const error& err() const noexcept { return error_; }

 private:
  error error_;
};

}  // namespace baton
