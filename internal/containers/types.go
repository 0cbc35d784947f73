package containers

import "github.com/codeinterp/codeinterp/internal/containerapi"

// The types of a container as a response uses it are package
// containerapi's; Manager implements them.
type (
	Spec      = containerapi.Spec
	InputFile = containerapi.InputFile
	Container = containerapi.Container
	File      = containerapi.File
	RunResult = containerapi.RunResult
)

// Errors Manager.Open and runs return for what the client named
// (errors.Is), as containerapi's.
var (
	ErrNotFound     = containerapi.ErrNotFound
	ErrExpired      = containerapi.ErrExpired
	ErrFileNotFound = containerapi.ErrFileNotFound
	ErrSecretsLost  = containerapi.ErrSecretsLost
	ErrUnavailable  = containerapi.ErrUnavailable
)
