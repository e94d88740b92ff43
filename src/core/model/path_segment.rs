//! A step of a field path through a JSON document. The kinds table declares reference
//! paths with it (a row of `kinds`, or of a custom kinds file) and `field_path` walks them, so
//! neither the table nor the walker has to import the other for the type.

/// One step of a reference path: a field, or every element of a list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Segment<'a> {
    Field(&'a str),
    Each,
}
