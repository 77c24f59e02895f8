// The HTTP side of qwen35_server: the OpenAI routes (chat and text completions, streamed as
// server-sent events or whole; models, health, metrics), the API key check and OpenAI's error bodies,
// over the continuous-batching scheduler. A request's ids travel from the stepping thread to its
// connection thread through a small channel, so a slow client never holds up a step; a client that
// goes away cancels its request.
#pragma once

#include <httplib.h>

#include <cstdint>
#include <memory>
#include <string>

#include "q35/io/tokenizer.hpp"
#include "scheduler.hpp"
#include "server_args.hpp"

namespace q35::server {

struct served_model {
  std::string id;        // what /v1/models lists and responses name by default
  int64_t n_ctx = 0;     // tokens of context a request may use (prompt and generation)
  int32_t fold_ids = 0;  // > 0: a synthetic model whose vocabulary exceeds the tokenizer's; ids shown modulo it
};

class http_api {
 public:
  // opt, tok and sched must outlive this object and every connection it serves.
  http_api(const options& opt, const io::tokenizer& tok, scheduler& sched, served_model model);
  ~http_api();
  http_api(const http_api&) = delete;
  http_api& operator=(const http_api&) = delete;

  // Installs the routes, handlers and limits on `http`.
  void routes(httplib::Server& http);

 private:
  class impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace q35::server
