# A stand-in for a libtorch built with the pre-C++11 ABI, as much of one as baton's configure reads
# before it stops: test_cmake_abi checks that it stops with a message that says why.
set(TORCH_FOUND TRUE)
set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=0")
set(TORCH_INCLUDE_DIRS "")
set(TORCH_LIBRARIES "")
