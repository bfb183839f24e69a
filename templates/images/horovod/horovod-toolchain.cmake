# Read by CMake when `pip install horovod` configures Horovod's native libraries (the build
# stage points the CMAKE_TOOLCHAIN_FILE environment variable here). It changes how long the
# build takes, not what the image holds: see horovod-project.cmake, read right after Horovod's
# own `project(horovod CXX)`.
set(CMAKE_PROJECT_horovod_INCLUDE "${CMAKE_CURRENT_LIST_DIR}/horovod-project.cmake")
