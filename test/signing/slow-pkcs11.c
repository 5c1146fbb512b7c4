/*
 * A PKCS#11 module that stands for a network HSM: every call is SoftHSM2's (SLOW_PKCS11_TARGET), and the calls a
 * round trip to the device would hold up (C_Initialize, C_Login, C_SignInit) first sleep SLOW_PKCS11_DELAY_MS, read
 * at each call. Built by test/signing/pkcs11-thread.test.ts.
 */
#include <dlfcn.h>
#include <stdlib.h>
#include <time.h>

#define CK_PTR *
#define CK_DECLARE_FUNCTION(returnType, name) returnType name
#define CK_DECLARE_FUNCTION_POINTER(returnType, name) returnType(*name)
#define CK_CALLBACK_FUNCTION(returnType, name) returnType(*name)
#ifndef NULL_PTR
#define NULL_PTR 0
#endif
#include "pkcs11.h"

static CK_FUNCTION_LIST_PTR real;
static CK_FUNCTION_LIST slow;

static void round_trip(void) {
  const char *ms = getenv("SLOW_PKCS11_DELAY_MS");
  long delay = ms == NULL ? 0 : atol(ms);
  struct timespec wait = {delay / 1000, (delay % 1000) * 1000000L};
  nanosleep(&wait, NULL);
}

static CK_RV slow_Initialize(CK_VOID_PTR args) {
  round_trip();
  return real->C_Initialize(args);
}

static CK_RV slow_Login(CK_SESSION_HANDLE session, CK_USER_TYPE user, CK_UTF8CHAR_PTR pin, CK_ULONG length) {
  round_trip();
  return real->C_Login(session, user, pin, length);
}

static CK_RV slow_SignInit(CK_SESSION_HANDLE session, CK_MECHANISM_PTR mechanism, CK_OBJECT_HANDLE key) {
  round_trip();
  return real->C_SignInit(session, mechanism, key);
}

CK_RV C_GetFunctionList(CK_FUNCTION_LIST_PTR_PTR list) {
  if (real == NULL) {
    void *module = dlopen(getenv("SLOW_PKCS11_TARGET"), RTLD_NOW | RTLD_LOCAL);
    if (module == NULL) return CKR_GENERAL_ERROR;
    CK_C_GetFunctionList get = (CK_C_GetFunctionList)dlsym(module, "C_GetFunctionList");
    if (get == NULL || get(&real) != CKR_OK) return CKR_GENERAL_ERROR;
    slow = *real;
    slow.C_Initialize = slow_Initialize;
    slow.C_Login = slow_Login;
    slow.C_SignInit = slow_SignInit;
  }
  *list = &slow;
  return CKR_OK;
}
