// Package tests holds Concord's black-box tests: they build the real
// `concord` binary, start it on loopback ports in temporary directories, and
// talk to it over NATS exactly as any client would. Every reply and event
// they see is validated against its JSON Schema in schema/.
//
// Most tests call t.Parallel: each has its own processes, data
// directories and ports (freeport hands a port out once per run), and
// most of their time is spent waiting on timers, ttls and elections, so
// two at a time (go test's -parallel, GOMAXPROCS) take about 370 s where
// one at a time took 590. Some run alone, and must: those that set
// environment variables (useRoles, useTenantAccounts: t.Setenv refuses a
// parallel test), those that load the CPU on purpose or measure how a
// node holds up under load, those that run the README's commands or
// etcdbench on fixed ports, the process-cleanup tests that look at
// every process of the run, the browser test, and the bus guard's tests
// (a second bootstrap or a foreign --join refused at start): the guard
// decides from the answers to its probe of the bus, and beside another
// test's load those came too late for a refusal at start in one of two
// runs (the fence then stopped the foreign node serving, as it should).
package tests
