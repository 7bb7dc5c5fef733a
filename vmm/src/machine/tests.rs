use viommu_device::testing::count_warnings;

use super::*;
use crate::privileges::Ids;

/// One warning, at startup, when the threads keep root's rights.
#[test]
fn root_without_user_is_warned_about_once() {
    let user = Some(Ids {
        uid: 65534,
        gid: 65534,
    });
    assert_eq!(count_warnings(|| warn_if_root_without_user(0, None)), 1);
    assert_eq!(count_warnings(|| warn_if_root_without_user(0, user)), 0);
    assert_eq!(count_warnings(|| warn_if_root_without_user(1000, None)), 0);
}
