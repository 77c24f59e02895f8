# Extra libraries for the io tests (included by tests/CMakeLists.txt with ${exe} = the test target):
# q35::io carries PCRE2, which the tokenizer's pre-tokenizer runs on.
target_link_libraries(${exe} PRIVATE q35::io)
