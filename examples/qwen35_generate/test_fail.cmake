# fail(msg) for the CLI's cmake -P test scripts: reports the check and counts it in a global property, so
# that a failure inside a helper function counts too; finish(what) ends the script with an error when any
# check failed.
set_property(GLOBAL PROPERTY q35_failures 0)
function(fail msg)
  message(SEND_ERROR "${msg}")
  get_property(n GLOBAL PROPERTY q35_failures)
  math(EXPR n "${n} + 1")
  set_property(GLOBAL PROPERTY q35_failures ${n})
endfunction()
function(finish what)
  get_property(n GLOBAL PROPERTY q35_failures)
  if(n GREATER 0)
    message(FATAL_ERROR "${n} ${what} check(s) failed")
  endif()
endfunction()
