// Package idgen makes the ids of what this server creates — containers and
// their files, Files API files, responses, code calls, conversations and
// their items — in the shapes OpenAI's ids have, from crypto/rand. It is
// the one maker of random ids: store, api, containers and interceptor all
// take theirs from it. (Whether a client's id can name a stored object is
// the store's rule: store.ValidID.)
//
// idgen.go holds all of it: Random (the maker), New, NewTagged with Tagged,
// and NewItem.
package idgen
