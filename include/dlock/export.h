// DLOCK_EXPORT marks the public API: libdlock.so is built with hidden
// visibility (docs/install.md, ABI), so a class or function declared in
// include/dlock without it is not part of the shared library's ABI. Inline
// and template code needs no mark; it is compiled into the caller.
// DLOCK_INTERNAL keeps a member of an exported class out of the ABI: one
// only the library itself calls (a private constructor taking internals).
#ifndef DLOCK_EXPORT_H_
#define DLOCK_EXPORT_H_

#if defined(__GNUC__) || defined(__clang__)
#define DLOCK_EXPORT [[gnu::visibility("default")]]
#define DLOCK_INTERNAL [[gnu::visibility("hidden")]]
#else
#define DLOCK_EXPORT
#define DLOCK_INTERNAL
#endif

#endif  // DLOCK_EXPORT_H_
