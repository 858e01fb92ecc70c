// Package docs holds vendorgate's documentation beside the top-level
// README: one page per reader (configuration, limits, the limiter's design,
// operating, deploying, performance, the API, the code map) and the
// benchmark reports. Its tests
// keep the pages linked: every relative link in the README and here names
// a file that exists, and a heading that exists when it names one; and
// they hold the code map (architecture.md) to the tree: every Go package
// named, every path it names there. A page (and a heading of it) that code,
// tests, scripts or deployment files name in prose exists.
package docs
