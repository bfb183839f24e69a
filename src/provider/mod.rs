//! The only code that talks to a cloud. A provider observes a cluster's resources by its tag
//! and creates or deletes one resource at a time (see [`crate::apply::Provider`]).

pub mod openstack;
