// Package modelstream is how the scripted models (the demo's and the
// end-to-end tests') stream a Responses-API answer: the event stream OpenAI
// sends for the final response object (sse.EventStream), one event
// at a time, flushed, with a pause before each as a model producing tokens.
package modelstream
