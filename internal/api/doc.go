// Package api serves OpenAI's Containers API and a minimal Files API over a
// store.Store, so that OpenAI's clients can give code a data file, list the
// files a container holds and download what the code wrote; and, over
// store.Responses and store.Conversations, the responses the interceptor
// stored and OpenAI's Conversations API.
//
// The one job of this package is the HTTP surface: routing, request
// decoding, OpenAI-shaped objects and errors. What is kept, for how long
// and within which bounds is the store's business (package store); the
// interceptor reaches the same store for /v1/responses.
//
// # Endpoints
//
//	POST   /v1/containers                                  create (JSON: name, file_ids, expires_after, memory_limit)
//	GET    /v1/containers                                  list (limit, order, after, name)
//	GET    /v1/containers/{id}                             retrieve
//	DELETE /v1/containers/{id}                             delete
//	POST   /v1/containers/{id}/files                       upload: multipart file, multipart file_id or JSON {"file_id"}
//	GET    /v1/containers/{id}/files                       list (limit, order, after)
//	GET    /v1/containers/{id}/files/{file_id}             retrieve
//	DELETE /v1/containers/{id}/files/{file_id}             delete
//	GET    /v1/containers/{id}/files/{file_id}/content     the bytes, with OpenAI's content-disposition
//	POST   /v1/files                                       upload (multipart file, purpose)
//	GET    /v1/files                                       list (limit, order, after, purpose)
//	GET    /v1/files/{id}                                  retrieve
//	DELETE /v1/files/{id}                                  delete
//	GET    /v1/files/{id}/content                          the bytes
//	GET    /v1/responses/{id}                              a stored response (include[]=code_interpreter_call.outputs)
//	GET    /v1/responses/{id}/input_items                  its input items (limit, order, after)
//	DELETE /v1/responses/{id}                              delete
//	POST   /v1/conversations                               create (JSON: items ≤ 20, metadata)
//	GET    /v1/conversations/{id}                          retrieve
//	POST   /v1/conversations/{id}                          update its metadata
//	DELETE /v1/conversations/{id}                          delete, with its items
//	POST   /v1/conversations/{id}/items                    add items (≤ 20; item_reference to a stored response's item)
//	GET    /v1/conversations/{id}/items                    list (limit, order, after)
//	GET    /v1/conversations/{id}/items/{item_id}          retrieve
//	DELETE /v1/conversations/{id}/items/{item_id}          delete (answers the conversation)
//
// A response id this server did not issue, and any other path below
// /v1/responses/, is the model server's: the request is passed to
// Config.ResponsesUpstreamURL with the caller's forwarded headers.
//
// The endpoints are ServeMux patterns (routes.go) matched against the
// decoded path's segments: an encoded slash separates ids as a slash does,
// a dot segment is an id, and an empty segment (a trailing or doubled
// slash) is no endpoint's.
//
// # Ownership
//
// Every object belongs to the credential that created it: store.Owner
// hashes the configured auth headers (Config.AuthHeaders). Another
// credential gets 404 for it, exactly as for an id that never existed, so
// ids cannot be probed.
//
// # Errors
//
// Every failure is OpenAI's {"error":{"message","type","param","code"}}:
// an unknown id is a 404, a container that expired is a 400 "Container is
// expired.", a body over the bound is a 413, malformed JSON or multipart is
// a 400 naming the parameter, a wrong method is a 405 and an unknown path a
// 404. Bodies are bounded while they are read (http.MaxBytesReader) and a
// request that fails stores nothing.
//
// # Files sources
//
// Config.FilesSource decides where file ids (container file_ids, uploads by
// file_id) come from: "local" serves /v1/files here; "upstream" leaves
// /v1/files to the model provider (Envoy routes it there) and fetches the
// ids from it with the caller's credential (HTTPFetcher); "off" has no
// Files API at all.
//
// # Source files
//
//	api.go            Config, New and the defaults; the file fetcher for the files source
//	routes.go         the ServeMux patterns, the credential check, the 404 and 405 answers
//	containers.go     the Containers API, and the JSON and list-parameter decoding the endpoints share
//	container_files.go  a container's files: upload, list, get, delete, content
//	files.go          the Files API: upload, list, get, delete, content
//	transfer.go       multipart upload forms, upload names, downloads (Content-Disposition, Content-Type)
//	conversations.go  the Conversations API
//	skills.go         the Skills API (Config.Skills): skills, versions, content; uploads checked by package skills
//	responses.go      stored responses, and the pass-through of the others to the model server
//	fetch.go          FileFetcher: file ids from the store or from the upstream's Files API
//	objects.go        OpenAI's objects as JSON: container, container file, file, list, deleted
//	errors.go         OpenAI's error answer and what each store failure answers
package api
