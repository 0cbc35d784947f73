/* codeinterp's reactor entry points for CPython 3.13 on wasm32-wasip1.
 *
 * python.wasm (a WASI command) starts, runs and ends an interpreter in one
 * _start call. This reactor instead lets the host drive the interpreter in
 * steps, so that a trusted step can initialise it once and snapshot linear
 * memory plus the exported mutable globals, and sessions can resume from
 * that image:
 *
 *   _initialize        wasi-libc's reactor start: C constructors only
 *   ci_init()          Py_InitializeFromConfig (home /usr/local, unbuffered
 *                      stdio, no argv parsing, no signal handlers)
 *   ci_buffer()        address of a CI_BUFFER_SIZE-byte buffer the host
 *                      writes Python source into
 *   ci_exec(len)       runs those len bytes in __main__; 0 ok, 1 exception
 *                      (printed), 2 bad length
 *
 * A reactor, not a command: wasm-ld wraps every export of a command module
 * in constructor/destructor calls, which would tear the interpreter down
 * after each call. __stack_pointer is exported (wasm-ld --export) because a
 * snapshot must carry it and wazero only reaches exported globals.
 */
#include "Python.h"
#include <stdio.h>

#define CI_BUFFER_SIZE (1 << 20)

static char ci_buf[CI_BUFFER_SIZE + 1];

__attribute__((export_name("ci_buffer"))) char *ci_buffer(void) { return ci_buf; }

__attribute__((export_name("ci_buffer_size"))) int ci_buffer_size(void) { return CI_BUFFER_SIZE; }

__attribute__((export_name("ci_init"))) int ci_init(void) {
    PyConfig config;
    PyConfig_InitPythonConfig(&config);
    config.buffered_stdio = 0;
    config.write_bytecode = 0;
    config.parse_argv = 0;
    config.install_signal_handlers = 0;
    config.use_environment = 0;
    PyStatus st = PyConfig_SetString(&config, &config.home, L"/usr/local");
    if (!PyStatus_Exception(st))
        st = PyConfig_SetString(&config, &config.program_name, L"python3.13");
    if (!PyStatus_Exception(st))
        st = Py_InitializeFromConfig(&config);
    PyConfig_Clear(&config);
    if (PyStatus_Exception(st)) {
        fprintf(stderr, "ci_init: %s: %s\n", st.func ? st.func : "?", st.err_msg ? st.err_msg : "?");
        fflush(stderr);
        return 1;
    }
    return 0;
}

__attribute__((export_name("ci_exec"))) int ci_exec(int len) {
    if (len < 0 || len > CI_BUFFER_SIZE)
        return 2;
    ci_buf[len] = '\0';
    PyObject *main = PyImport_AddModule("__main__"); /* borrowed */
    if (main == NULL) {
        PyErr_Print();
        return 1;
    }
    PyObject *globals = PyModule_GetDict(main); /* borrowed */
    PyObject *r = PyRun_StringFlags(ci_buf, Py_file_input, globals, globals, NULL);
    int rc = 0;
    if (r == NULL) {
        PyErr_Print();
        rc = 1;
    } else {
        Py_DECREF(r);
    }
    fflush(NULL);
    return rc;
}
