// sim/options.hpp: the environment variables that pick the thread order, the worker count and the
// byte unwritten memory holds.
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <utility>

#include "q35/core/config.hpp"
#include "test_util.hpp"

#if Q35_BACKEND_SIM
#include "q35/sim/options.hpp"

namespace sim_test_options {

using namespace q35;

// Sets an environment variable for a scope and restores it.
class scoped_env {
 public:
  scoped_env(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) had_ = true, old_ = old;
    setenv(name, value, 1);
  }
  ~scoped_env() { had_ ? setenv(name_, old_.c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  bool had_ = false;
  std::string old_;
};

std::string env_error(const char* name, const char* value) {
  scoped_env e(name, value);
  try {
    sim::detail::options_from_env();
  } catch (const std::invalid_argument& ex) {
    return ex.what();
  }
  return "";
}

TEST_CASE("sim options: orders, seeds and workers from the environment") {
  {
    scoped_env e("Q35_SIM_ORDER", "shuffled:1234");
    const auto o = sim::detail::options_from_env();
    CHECK(o.order == sim::thread_order::shuffled);
    CHECK(o.seed == 1234u);
  }
  {
    scoped_env e("Q35_SIM_ORDER", "reverse");
    CHECK(sim::detail::options_from_env().order == sim::thread_order::reverse);
  }
  {
    scoped_env e("Q35_SIM_WORKERS", "3");
    CHECK(sim::detail::options_from_env().workers == 3);
  }
  {
    const char* old = std::getenv("Q35_SIM_FILL");  // the default, with the variable unset
    const std::string saved = old ? old : "";
    unsetenv("Q35_SIM_FILL");
    CHECK(sim::detail::options_from_env().fill == 0xff);
    if (old) setenv("Q35_SIM_FILL", saved.c_str(), 1);
  }
  for (const auto& [v, b] : {std::pair{"0x3c", 0x3c}, {"0xA5", 0xa5}, {"0", 0}, {"255", 255}, {"none", -1}}) {
    scoped_env e("Q35_SIM_FILL", v);
    CHECK(sim::detail::options_from_env().fill == b);
  }
  {
    const char* old = std::getenv("Q35_SIM_STREAMS");  // lazy by default
    const std::string saved = old ? old : "";
    unsetenv("Q35_SIM_STREAMS");
    CHECK(sim::detail::options_from_env().lazy_streams);
    if (old) setenv("Q35_SIM_STREAMS", saved.c_str(), 1);
  }
  for (const auto& [v, lazy] : {std::pair{"lazy", true}, {"eager", false}}) {
    scoped_env e("Q35_SIM_STREAMS", v);
    CHECK(sim::detail::options_from_env().lazy_streams == lazy);
  }
}

TEST_CASE("sim options: bad values are errors that name the variable and the value") {
  CHECK(env_error("Q35_SIM_ORDER", "sideways") ==
        "Q35_SIM_ORDER='sideways': expected forward, reverse or shuffled[:SEED]");
  CHECK(env_error("Q35_SIM_ORDER", "shuffled:x1") ==
        "Q35_SIM_ORDER='shuffled:x1': the seed after 'shuffled:' must be a decimal number");
  CHECK(env_error("Q35_SIM_ORDER", "shuffled:") ==
        "Q35_SIM_ORDER='shuffled:': the seed after 'shuffled:' must be a decimal number");
  CHECK(env_error("Q35_SIM_WORKERS", "0") == "Q35_SIM_WORKERS='0': expected 1..256");
  CHECK(env_error("Q35_SIM_WORKERS", "two") == "Q35_SIM_WORKERS='two': expected 1..256");
  CHECK(env_error("Q35_SIM_WORKERS", "999") == "Q35_SIM_WORKERS='999': expected 1..256");
  for (const char* v : {"256", "-1", "0x100", "0xg0", "ff", "", "0x"})
    CHECK(env_error("Q35_SIM_FILL", v) ==
          std::string("Q35_SIM_FILL='") + v + "': expected a byte (0..255 or 0x00..0xff) or none");
  for (const char* v : {"", "Lazy", "sync"})
    CHECK(env_error("Q35_SIM_STREAMS", v) == std::string("Q35_SIM_STREAMS='") + v + "': expected lazy or eager");
}

}  // namespace sim_test_options
#endif
