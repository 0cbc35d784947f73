// Package apierror is OpenAI's error answer: the one Error type that the
// Containers, Files, Conversations and Responses APIs of this server
// (package api) and the Responses-API interceptor send, rendered as
// OpenAI renders it, {"error":{"message","type","param","code"}}, and the
// constructors of the errors they share.
//
// apierror.go holds the type, its JSON body and the constructors.
package apierror
