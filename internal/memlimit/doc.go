// Package memlimit is a container's memory_limit as OpenAI's Containers
// and Responses APIs spell it ("1g", "4g", "16g", "64g"): the one parser
// and formatter of that syntax, the values OpenAI offers and its default,
// for the packages that take the value from a client (api, interceptor)
// and the one that sizes sessions by it (containers).
//
// memlimit.go holds all of it: Parse, Format, Choices and Default.
package memlimit
