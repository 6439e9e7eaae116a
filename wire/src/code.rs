//! gRPC's status codes by their canonical names (`OK`, `UNAVAILABLE`, ...,
//! as gRPC's status code documentation spells them), both ways, from one
//! table.

use tonic::Code;

/// Every code with its name, in code order (0 to 16).
const CODES: [(Code, &str); 17] = [
    (Code::Ok, "OK"),
    (Code::Cancelled, "CANCELLED"),
    (Code::Unknown, "UNKNOWN"),
    (Code::InvalidArgument, "INVALID_ARGUMENT"),
    (Code::DeadlineExceeded, "DEADLINE_EXCEEDED"),
    (Code::NotFound, "NOT_FOUND"),
    (Code::AlreadyExists, "ALREADY_EXISTS"),
    (Code::PermissionDenied, "PERMISSION_DENIED"),
    (Code::ResourceExhausted, "RESOURCE_EXHAUSTED"),
    (Code::FailedPrecondition, "FAILED_PRECONDITION"),
    (Code::Aborted, "ABORTED"),
    (Code::OutOfRange, "OUT_OF_RANGE"),
    (Code::Unimplemented, "UNIMPLEMENTED"),
    (Code::Internal, "INTERNAL"),
    (Code::Unavailable, "UNAVAILABLE"),
    (Code::DataLoss, "DATA_LOSS"),
    (Code::Unauthenticated, "UNAUTHENTICATED"),
];

/// A code's canonical upper-case name: metric labels, messages.
pub fn code_name(code: Code) -> &'static str {
    // `Code` is a field-less enum numbered 0 to 16, as the table is.
    CODES.get(code as usize).map_or("UNKNOWN", |(_, name)| name)
}

/// The code a canonical name stands for, in any ASCII case
/// (`unavailable` too); `None` for a name that is not one.
pub fn code_from_name(name: &str) -> Option<Code> {
    CODES
        .iter()
        .find(|(_, n)| n.eq_ignore_ascii_case(name))
        .map(|(code, _)| *code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_in_code_order_and_names_round_trip() {
        for (i, (code, name)) in CODES.iter().enumerate() {
            assert_eq!(*code as usize, i);
            assert_eq!(Code::from_i32(i as i32), *code);
            assert_eq!(code_name(*code), *name);
            assert_eq!(code_from_name(name), Some(*code));
        }
        assert_eq!(code_name(Code::DeadlineExceeded), "DEADLINE_EXCEEDED");
        assert_eq!(code_from_name("unavailable"), Some(Code::Unavailable));
        assert_eq!(code_from_name("NOPE"), None);
        assert_eq!(code_from_name("14"), None);
    }
}
