# Included right after Horovod's `project(horovod CXX)` (horovod-toolchain.cmake). Two cuts
# of the image's longest build step (measured per object: docs/notes/suite-time.md, stop 72).

# No debug information: `-g0` comes after the build type's `-O3 -g` on every compile line.
# The Dockerfile strips the libraries anyway (54 of horovod's 56 MB were debug symbols), and
# writing them took 25-40% of each object's compile.
add_compile_options(-g0)

# Horovod adds Gloo up to three times: plain, and copies for frameworks built with the old C++
# ABI or with C++17 (TensorFlow 2.12), and builds every copy although each framework's
# library links one: with TensorFlow alone 37 of the 101 objects are the plain copy, linked by
# nothing. Out of `all`, a copy is still built wherever a library links it.
function(hvd_gloo_only_where_linked)
  foreach(copy gloo compatible_gloo compatible17_gloo)
    if(TARGET ${copy})
      set_property(TARGET ${copy} PROPERTY EXCLUDE_FROM_ALL TRUE)
    endif()
  endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL hvd_gloo_only_where_linked)
