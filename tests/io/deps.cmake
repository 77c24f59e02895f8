# Extra libraries for the io tests (included by tests/CMakeLists.txt with ${exe} = the test target):
# q35::io carries PCRE2, which the tokenizer's pre-tokenizer runs on; nlohmann/json reads the
# fixtures' ref_*.json cases (Debian: nlohmann-json3-dev).
find_package(nlohmann_json 3 CONFIG REQUIRED)
target_link_libraries(${exe} PRIVATE q35::io nlohmann_json::nlohmann_json)
