package expctxkeys

// CompilationCacheTrustedKey is a context.Context key for
// experimental.WithCompilationCacheTrusted. (codeinterp patch)
type CompilationCacheTrustedKey struct{}

// ModuleSHA256Key is a context.Context key for
// experimental.WithCompilationCacheTrustedSHA256; its value is a
// [32]byte. (codeinterp patch)
type ModuleSHA256Key struct{}
