// Package jsonx edits and reads JSON text without decoding what it does
// not touch: the interceptor carries the request and response bodies of
// OpenAI's Responses API byte-for-value, so fields and item types it does
// not know survive, and a large body is walked once.
//
// The files:
//
//   - jsonx.go: an object's members with their offsets (Field, Fields,
//     Object), editing members in place (Edit, Set, Del, EditObject,
//     AppendEditedObject, AppendEditedFields), DuplicateKey, and writing
//     JSON strings and arrays (AppendQuote, Quote, AppendArray).
//   - scan.go: TopFields, the fast walk of an object's top level that skips
//     long strings with a vectorised search.
//   - stream.go: CodeDecoder, which decodes the "code" member of a function
//     call's arguments while they arrive in pieces.
package jsonx
