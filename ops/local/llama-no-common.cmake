# Read by CMake right after llama.cpp's own project() call (`make install-local` passes it
# as CMAKE_PROJECT_llama.cpp_INCLUDE). llama-cpp-python forces llama.cpp's common library
# on for its multimodal library; with that off (LLAVA_BUILD=OFF) nothing the package loads
# uses it, yet it is half of the compile (10.6 CPU minutes with it, 5.2 without, on two
# cores). llama.cpp reads the option after this file runs, so the FORCE here wins.
set(LLAMA_BUILD_COMMON OFF CACHE BOOL "llama.cpp common library (unused by llama-cpp-python without LLAVA_BUILD)" FORCE)
